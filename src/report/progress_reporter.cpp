#include "finetune/report/progress_reporter.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

namespace finetune {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressReporter::ProgressReporter(int64_t total_steps, bool interactive)
    : total_steps_(total_steps), interactive_(interactive) {}

namespace {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%02lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return buffer;
}

}  // namespace

void ProgressReporter::report(const StepMetrics& m) {
  const double fraction = total_steps_ > 0 ? static_cast<double>(m.step) / static_cast<double>(total_steps_) : 0;
  const double eta = m.step > 0 ? m.elapsed_s / static_cast<double>(m.step) * static_cast<double>(total_steps_ - m.step) : -1;
  char stats[256];
  std::snprintf(stats, sizeof stats, "step %lld/%lld  loss %.4f  lr %.3e  grad_norm %.3f  %.0f tok/s  ETA %s",
                static_cast<long long>(m.step), static_cast<long long>(total_steps_), m.loss, m.lr, m.grad_norm,
                m.tokens_per_s, format_duration(eta).c_str());
  std::string line = stats;
  if (m.eval_loss) line += "  eval_loss " + std::to_string(*m.eval_loss);
  if (interactive_) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar = "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] ";
    std::cerr << "\r\033[K" << bar << line << std::flush;
    drawn_ = true;
  } else {
    std::cerr << line << std::endl;
  }
}

void ProgressReporter::finish() {
  if (interactive_ && drawn_) std::cerr << std::endl;
  drawn_ = false;
}

}  // namespace finetune
