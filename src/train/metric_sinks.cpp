#include "finetune/train/metric_sinks.h"

#include <filesystem>

#include "finetune/launch/environment.h"

namespace finetune {
namespace {

std::string metrics_path(const std::string& output_dir) {
  std::filesystem::create_directories(output_dir);
  return output_dir + "/metrics.jsonl";
}

}  // namespace

MetricSinks::MetricSinks(const std::string& output_dir, bool tensorboard, int64_t total_steps,
                         const std::vector<nlohmann::json>& history)
    : metrics_(metrics_path(output_dir)), progress_(total_steps, stderr_is_terminal()) {
  for (const auto& line : history) metrics_.write_line(line.dump());
  // A new runs/ directory for every run, a resumed one too (as HF's TensorBoardCallback): it holds
  // what this run logs, and TensorBoard shows the earlier run's directory beside it.
  if (tensorboard) tensorboard_.emplace(tensorboard_log_dir(output_dir, unix_time_now(), host_name()));
}

void MetricSinks::write(const StepMetrics& line) {
  metrics_.write(line);
  if (tensorboard_) tensorboard_->add_scalars(line.step, step_scalars(line));
  progress_.report(line);
}

void MetricSinks::finish_progress() { progress_.finish(); }

void MetricSinks::write_summary(int64_t step, const RunSummaryMetrics& summary) {
  if (tensorboard_) tensorboard_->add_scalars(step, summary_scalars(summary));
}

}  // namespace finetune
