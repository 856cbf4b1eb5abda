// TensorBoardWriter: the HF/torch naming of runs/ directories and event files, and unbuffered
// appends of whole TFRecords.
#include "finetune/report/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "finetune/launch/environment.h"
#include "finetune/report/event_proto.h"
#include "finetune/report/tfrecord.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Written into the first event's source_metadata, where torch writes its module's name.
constexpr const char* kWriterName = "finetune";

}  // namespace

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string tensorboard_run_name(const std::tm& local_time, std::string_view hostname) {
  static constexpr const char* kMonths[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                              "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%s%02d_%02d-%02d-%02d", kMonths[local_time.tm_mon % 12], local_time.tm_mday,
                local_time.tm_hour, local_time.tm_min, local_time.tm_sec);
  return std::string(stamp) + "_" + std::string(hostname);
}

std::string tensorboard_log_dir(const std::string& output_dir, double unix_time, std::string_view hostname) {
  const auto seconds = static_cast<std::time_t>(std::floor(unix_time));  // datetime.now() drops the fraction
  std::tm local_time{};
  ::localtime_r(&seconds, &local_time);
  return (std::filesystem::path(output_dir) / "runs" / tensorboard_run_name(local_time, hostname)).string();
}

std::string event_file_name(double unix_time, std::string_view hostname, int64_t pid, int64_t writer_index) {
  char seconds[32];  // Python's "%010d" % time.time() truncates toward zero
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(std::trunc(unix_time)));
  return "events.out.tfevents." + std::string(seconds) + "." + std::string(hostname) + "." + std::to_string(pid) +
         "." + std::to_string(writer_index);
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir, WallClock clock) : clock_(std::move(clock)) {
  std::error_code error;
  std::filesystem::create_directories(log_dir, error);
  if (error) throw Error(log_dir + ": cannot create the TensorBoard log directory: " + error.message());
  const double now = clock_();
  path_ = (std::filesystem::path(log_dir) / event_file_name(now, host_name(), ::getpid(), 0)).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path_ + ": cannot create the TensorBoard event file: " + std::strerror(errno));
  write_records(tfrecord_frame(encode_file_version_event(now, kWriterName)));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<ScalarValue>& scalars) {
  const double now = clock_();
  std::string records;
  for (const auto& scalar : scalars) records += tfrecord_frame(encode_scalar_event(now, step, scalar.tag, scalar.value));
  write_records(records);
}

void TensorBoardWriter::write_records(const std::string& records) {
  const char* bytes = records.data();
  size_t left = records.size();
  while (left > 0) {
    const ssize_t written = ::write(fd_, bytes, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": cannot write the TensorBoard event file: " + std::strerror(errno));
    }
    bytes += written;
    left -= static_cast<size_t>(written);
  }
}

}  // namespace finetune
