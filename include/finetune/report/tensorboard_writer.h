// TensorBoard event files, named and laid out as HF Trainer's TensorBoardCallback writes them
// through torch's SummaryWriter:
//   OUTPUT_DIR/runs/<%b%d_%H-%M-%S>_<hostname>/                   transformers' default_logdir()
//     events.out.tfevents.<unix seconds %010d>.<hostname>.<pid>.<n> tensorboard's EventFileWriter
// The file opens with the brain.Event:2 file_version event; each scalar is then one Event
// (report/event_proto.h) in a TFRecord (report/tfrecord.h), at the given global step.
//
// Unlike SummaryWriter, which queues events and flushes every 120 s, add_scalars hands all its
// records to the kernel in one write(2) before it returns: a run killed with SIGKILL keeps every
// step it logged, each step whole.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace finetune {

struct ScalarValue {
  std::string tag;  // e.g. "train/loss" (report/metrics_scalars.h)
  double value;     // stored as float32, as SummaryWriter.add_scalar stores it
};

using WallClock = std::function<double()>;  // seconds since the Unix epoch
double unix_time_now();

// "Nov23_19-26-51_myhost" from the local time: English month names, as Python's %b in the C locale.
std::string tensorboard_run_name(const std::tm& local_time, std::string_view hostname);

// OUTPUT_DIR/runs/<run name at `unix_time` in the local time zone>.
std::string tensorboard_log_dir(const std::string& output_dir, double unix_time, std::string_view hostname);

// "events.out.tfevents.<%010d of unix_time>.<hostname>.<pid>.<writer_index>"; writer_index is
// tensorboard's per-process count of event files opened before this one.
std::string event_file_name(double unix_time, std::string_view hostname, int64_t pid, int64_t writer_index);

class TensorBoardWriter {
 public:
  // Creates `log_dir` and a new event file in it (writer index 0: one writer per process) and
  // writes the file_version event. Errors name the path.
  explicit TensorBoardWriter(const std::string& log_dir, WallClock clock = unix_time_now);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event per scalar, all stamped with the clock's time now and `step`.
  void add_scalars(int64_t step, const std::vector<ScalarValue>& scalars);

  const std::string& path() const { return path_; }

 private:
  void write_records(const std::string& records);

  std::string path_;
  WallClock clock_;
  int fd_ = -1;
};

}  // namespace finetune
