// The progress display of training steps on stderr: a redrawn bar on a terminal, plain lines
// otherwise (the steps metrics.jsonl records, report/metrics.h).
#pragma once

#include <cstdint>

#include "finetune/report/metrics.h"

namespace finetune {

class ProgressReporter {
 public:
  ProgressReporter(int64_t total_steps, bool interactive);
  void report(const StepMetrics& metrics);  // draws the bar / prints a line
  void finish();

 private:
  int64_t total_steps_;
  bool interactive_;
  bool drawn_ = false;
};

bool stderr_is_terminal();

}  // namespace finetune
