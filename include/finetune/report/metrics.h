// Training metrics: OUTPUT_DIR/metrics.jsonl (one JSON object per logged step); the progress
// display that shows the same steps is report/progress_reporter.h.
//
// metrics.jsonl schema, one object per line:
//   step         int     optimizer steps completed
//   epoch        float   fractional epoch (steps / steps_per_epoch)
//   loss         float   global token-weighted mean train loss over the steps since the last log
//   lr           float   learning rate used by the last step
//   grad_norm    float   global gradient 2-norm before clipping, last step
//   tokens       int     non-padding tokens processed so far (all ranks)
//   tokens_per_s float   tokens/s (all ranks) since the last log
//   elapsed_s    float   seconds since training started
//   rank_imbalance float the logged step's largest per-rank token count over the ranks' mean
//                         (non-padding tokens; 1.0 on one process)
//   eval_loss    float   only on lines where an evaluation ran
//   <objective metrics>  float  the objective's own (train/objective.h metric_names), the window's
//                         mean: dpo, orpo: TRL's names, e.g. rewards/chosen, logps/rejected; train
//                         on a MoE model with the router loss: aux_loss (Note [Router
//                         load-balancing loss])
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace finetune {

struct StepMetrics {
  int64_t step = 0;
  double epoch = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;
  double tokens_per_s = 0;
  double elapsed_s = 0;
  double rank_imbalance = 1.0;
  std::optional<double> peak_memory_gib;  // this rank's GPU allocator peak since the load (none off GPU)
  std::optional<double> eval_loss;
  std::vector<std::pair<std::string, double>> objective_metrics;  // name -> value, in the objective's order
};

std::string metrics_json_line(const StepMetrics& metrics);
nlohmann::json metrics_json(const StepMetrics& metrics);

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // truncates; throws naming the path
  void write(const StepMetrics& metrics);            // appends one line and flushes
  void write_line(const std::string& json_line);     // an already formatted line (resume)

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace finetune
