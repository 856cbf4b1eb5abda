// Where rank 0's log lines go: OUTPUT_DIR/metrics.jsonl (rewritten from the history on resume),
// TensorBoard event files under OUTPUT_DIR/runs/ (optional) and the progress display.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/report/metrics_scalars.h"
#include "finetune/report/tensorboard_writer.h"
#include "finetune/report/metrics.h"
#include "finetune/report/progress_reporter.h"

namespace finetune {

class MetricSinks {
 public:
  // Creates output_dir and writes metrics.jsonl's earlier lines (`history`, on resume).
  MetricSinks(const std::string& output_dir, bool tensorboard, int64_t total_steps,
              const std::vector<nlohmann::json>& history);

  void write(const StepMetrics& line);
  void finish_progress();
  // HF's end-of-training log (TensorBoard only).
  void write_summary(int64_t step, const RunSummaryMetrics& summary);

 private:
  MetricsWriter metrics_;
  std::optional<TensorBoardWriter> tensorboard_;
  ProgressReporter progress_;
};

}  // namespace finetune
