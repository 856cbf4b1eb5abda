// The download progress line: decimal sizes as the hub shows them, percentage, rate, time left;
// and what the bar prints on a terminal and in a log.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "finetune/hub/progress_bar.h"

namespace finetune {
namespace {

TEST(ProgressBar, HumanBytes) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(900), "900 B");
  EXPECT_EQ(human_bytes(999), "999 B");
  EXPECT_EQ(human_bytes(1000), "1.0 kB");
  EXPECT_EQ(human_bytes(1536), "1.5 kB");  // decimal units, not KiB
  EXPECT_EQ(human_bytes(999000), "999.0 kB");
  EXPECT_EQ(human_bytes(1000000), "1.0 MB");
  EXPECT_EQ(human_bytes(512000000), "512.0 MB");
  EXPECT_EQ(human_bytes(16100000000.0), "16.1 GB");
  EXPECT_EQ(human_bytes(1e12), "1.0 TB");
  EXPECT_EQ(human_bytes(2.5e15), "2500.0 TB");  // TB is the largest unit
}

TEST(ProgressBar, Describe) {
  EXPECT_EQ(ProgressBar::describe(500000000, 2000000000, 2.0), "500.0 MB / 2.0 GB (25%), 250.0 MB/s, 6 s left");
  EXPECT_EQ(ProgressBar::describe(1200000000, 16100000000, 2.34375),
            "1.2 GB / 16.1 GB (7%), 512.0 MB/s, 30 s left");  // 29.1 s rounds up
  EXPECT_EQ(ProgressBar::describe(3, 10, 4.0), "3 B / 10 B (30%), 1 B/s, 10 s left");  // 9.33 s -> 10
  EXPECT_EQ(ProgressBar::describe(1999, 2000, 1.0), "2.0 kB / 2.0 kB (99%), 2.0 kB/s, 1 s left");  // not 100% yet
}

TEST(ProgressBar, DescribeEdges) {
  EXPECT_EQ(ProgressBar::describe(0, 100, 0.0), "0 B / 100 B (0%), 0 B/s");                // nothing yet: no time left
  EXPECT_EQ(ProgressBar::describe(100, 100, 4.0), "100 B / 100 B (100%), 25 B/s");         // done: no time left
  EXPECT_EQ(ProgressBar::describe(1500, -1, 1.0), "1.5 kB, 1.5 kB/s");                     // unknown total
  EXPECT_EQ(ProgressBar::describe(1500, 0, 1.0), "1.5 kB, 1.5 kB/s");                      // zero total
  EXPECT_EQ(ProgressBar::describe(50, 100, 0.0), "50 B / 100 B (50%), 0 B/s");             // no time measured
  EXPECT_EQ(ProgressBar::describe(150, 100, 1.0), "150 B / 100 B (150%), 150 B/s");        // more than announced
}

TEST(ProgressBar, TerminalRedrawsOneLineAndEndsIt) {
  std::atomic<int64_t> done{1000};
  ::testing::internal::CaptureStderr();
  { ProgressBar bar("Downloading org/m", 2000, done, true); }
  const std::string out = ::testing::internal::GetCapturedStderr();
  const std::string start = "\r\033[KDownloading org/m: 1.0 kB / 2.0 kB (50%), ";
  EXPECT_EQ(out.rfind(start, 0), 0u) << out;
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << out;
}

TEST(ProgressBar, LogPrintsNothingForAShortDownload) {
  std::atomic<int64_t> done{1000};
  ::testing::internal::CaptureStderr();
  { ProgressBar bar("Downloading org/m", 2000, done, false); }  // stopped well within a second
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace finetune
