// TensorBoardWriter: HF's runs/<date>_<host> and torch's event file names, and the file's bytes
// (the records are the ones test_event_records.cpp checks against tensorboard's writer).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "../test_support.h"
#include "finetune/report/event_proto.h"
#include "finetune/launch/environment.h"
#include "finetune/report/tensorboard_writer.h"
#include "finetune/report/tfrecord.h"

namespace finetune {
namespace {

using testing::TempDir;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// TZ set for the scope, as the user's time zone decides the run name (datetime.now()).
class ScopedTimeZone {
 public:
  explicit ScopedTimeZone(const char* zone) {
    if (const char* old = std::getenv("TZ")) old_ = old;
    ::setenv("TZ", zone, 1);
    ::tzset();
  }
  ~ScopedTimeZone() {
    if (old_) ::setenv("TZ", old_->c_str(), 1);
    else ::unsetenv("TZ");
    ::tzset();
  }

 private:
  std::optional<std::string> old_;
};

TEST(TensorBoardWriter, RunNameIsHfDefaultLogdir) {
  // datetime(2026, 11, 23, 19, 26, 51).strftime("%b%d_%H-%M-%S") + "_" + hostname
  std::tm late{};
  late.tm_year = 126, late.tm_mon = 10, late.tm_mday = 23, late.tm_hour = 19, late.tm_min = 26, late.tm_sec = 51;
  EXPECT_EQ(tensorboard_run_name(late, "node-1"), "Nov23_19-26-51_node-1");
  std::tm early{};
  early.tm_year = 126, early.tm_mon = 0, early.tm_mday = 5, early.tm_hour = 3, early.tm_min = 4, early.tm_sec = 9;
  EXPECT_EQ(tensorboard_run_name(early, "h"), "Jan05_03-04-09_h");
}

TEST(TensorBoardWriter, LogDirUsesLocalTimeAndDropsTheFraction) {
  {
    ScopedTimeZone utc("UTC");
    EXPECT_EQ(tensorboard_log_dir("out", 1763926011.99, "box"), "out/runs/Nov23_19-26-51_box");
  }
  {
    ScopedTimeZone tokyo("Asia/Tokyo");  // +9 h: the next day
    EXPECT_EQ(tensorboard_log_dir("/a/b", 1763926011.0, "box"), "/a/b/runs/Nov24_04-26-51_box");
  }
}

TEST(TensorBoardWriter, EventFileNameIsTensorboards) {
  // "events.out.tfevents.%010d.%s.%s.%s" % (time.time(), socket.gethostname(), os.getpid(), uid)
  EXPECT_EQ(event_file_name(1763926011.99, "box", 4242, 0), "events.out.tfevents.1763926011.box.4242.0");
  EXPECT_EQ(event_file_name(12.7, "h", 1, 3), "events.out.tfevents.0000000012.h.1.3");
}

TEST(TensorBoardWriter, WritesTheFileVersionEventThenScalars) {
  TempDir dir("tensorboard");
  const std::string log_dir = dir.file("runs/Nov23_19-26-51_box");  // created with its parents
  double now = 1700000000.25;
  TensorBoardWriter writer(log_dir, [&now] { return now; });
  EXPECT_EQ(writer.path(), log_dir + "/" + event_file_name(1700000000.25, host_name(), ::getpid(), 0));
  const std::string version = tfrecord_frame(encode_file_version_event(1700000000.25, "finetune"));
  EXPECT_EQ(read_bytes(writer.path()), version);  // on disk before the first scalar

  now = 1700000001.5;
  writer.add_scalars(3, {{"train/loss", 2.5}});
  const std::string loss = tfrecord_frame(encode_scalar_event(1700000001.5, 3, "train/loss", 2.5));
  EXPECT_EQ(read_bytes(writer.path()), version + loss);  // no buffering: readable at once

  now = 1700000002.0;
  writer.add_scalars(4, {{"train/loss", 1.25}, {"eval/loss", 1.5}});
  EXPECT_EQ(read_bytes(writer.path()),
            version + loss + tfrecord_frame(encode_scalar_event(1700000002.0, 4, "train/loss", 1.25)) +
                tfrecord_frame(encode_scalar_event(1700000002.0, 4, "eval/loss", 1.5)));
}

TEST(TensorBoardWriter, UncreatableLogDirIsNamed) {
  TempDir dir("tensorboard");
  dir.write("file", "x");
  const std::string log_dir = dir.file("file/runs");
  const std::string message = testing::error_message([&] { TensorBoardWriter writer(log_dir); });
  testing::expect_contains(message, {log_dir, "TensorBoard log directory"});
}

}  // namespace
}  // namespace finetune
