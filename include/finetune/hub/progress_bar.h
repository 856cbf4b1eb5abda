// The download's progress on stderr: bytes done of the total, rate and time left. On a terminal,
// one line redrawn in place a few times a second; otherwise (a log file, a job scheduler) a plain
// line every few seconds, so logs stay readable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace finetune {

class ProgressBar {
 public:
  // Reads `bytes_done` from its own thread until stopped; `total` bytes (-1: unknown).
  ProgressBar(std::string label, int64_t total, const std::atomic<int64_t>& bytes_done, bool terminal);
  ~ProgressBar();  // stops and prints the last state
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // "1.2 GB / 16.1 GB (7%), 512.0 MB/s, 29 s left"
  static std::string describe(int64_t done, int64_t total, double seconds);

 private:
  void run();

  std::string label_;
  int64_t total_;
  const std::atomic<int64_t>& bytes_done_;
  bool terminal_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// "16.1 GB", "512.0 MB", "900 B" (decimal units, as the hub shows sizes).
std::string human_bytes(double bytes);

}  // namespace finetune
