#include "finetune/hub/progress_bar.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace finetune {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kTerminalInterval{250};
constexpr std::chrono::milliseconds kLogInterval{5000};

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

}  // namespace

std::string human_bytes(double bytes) {
  static const char* const units[] = {"B", "kB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 4) bytes /= 1000, ++unit;
  return unit == 0 ? fixed(bytes, 0) + " B" : fixed(bytes, 1) + " " + units[unit];
}

std::string ProgressBar::describe(int64_t done, int64_t total, double seconds) {
  std::string text = human_bytes(static_cast<double>(done));
  if (total > 0) {
    text += " / " + human_bytes(static_cast<double>(total)) + " (" +
            std::to_string(static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total))) + "%)";
  }
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  text += ", " + human_bytes(rate) + "/s";
  if (total > 0 && rate > 0 && done < total) {
    text += ", " + std::to_string(static_cast<int64_t>(std::ceil(static_cast<double>(total - done) / rate))) + " s left";
  }
  return text;
}

ProgressBar::ProgressBar(std::string label, int64_t total, const std::atomic<int64_t>& bytes_done, bool terminal)
    : label_(std::move(label)), total_(total), bytes_done_(bytes_done), terminal_(terminal), thread_([this] { run(); }) {}

ProgressBar::~ProgressBar() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ProgressBar::run() {
  const auto started = Clock::now();
  const auto interval = terminal_ ? kTerminalInterval : kLogInterval;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    const bool last = wake_.wait_for(lock, interval, [this] { return stopping_; });
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    const std::string line = label_ + ": " + describe(bytes_done_.load(), total_, seconds);
    if (terminal_) std::cerr << "\r\033[K" << line << (last ? "\n" : "") << std::flush;
    else if (!last || seconds >= 1) std::cerr << line << "\n" << std::flush;
    if (last) return;
  }
}

}  // namespace finetune
