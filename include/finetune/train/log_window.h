// The trainer's metrics component: every step's global loss and token count, kept on the device
// until a log point reads them (one host sync per log line, none per step), the last step's
// tokens per rank (for rank_imbalance), and the history of
// the lines logged so far. Its state() is what a checkpoint keeps of the metrics, so a resumed run
// logs exactly the windows the uninterrupted run logs, a window cut by the checkpoint included.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "finetune/report/metrics.h"

namespace finetune {

struct MetricsState {
  int64_t tokens = 0;                        // non-padding tokens processed so far, all ranks
  std::vector<double> step_losses;           // every step's global mean loss so far
  std::vector<nlohmann::json> log_history;   // metrics.jsonl's lines so far
  // The objective's metrics (train/objective.h) of each step after the last log line, when it has any.
  std::vector<std::vector<double>> window_metrics;
};

class LogWindow {
 public:
  // `metric_names`: the objective's metrics, logged beside the loss (none for SFT).
  explicit LogWindow(const at::Device& device, std::vector<std::string> metric_names = {});

  // One step's global mean loss and non-padding tokens (device scalars: no host sync), and each
  // rank's non-padding tokens in it ((world) device tensor); `metrics`: the step's objective
  // metrics ((M) fp64 device tensor, M = metric_names().size()), undefined when there are none.
  void add_step(const at::Tensor& loss, const at::Tensor& tokens, const at::Tensor& rank_tokens,
                const at::Tensor& metrics = {});
  // The open window's throughput counts from now (when training starts).
  void restart_clock();
  const at::Tensor& last_loss() const { return window_losses_.back(); }

  // Closes the window at a log point: fills `line`'s loss (the window's mean step loss) and
  // objective metrics (each the window's mean over its steps, as TRL averages what it logged), tokens
  // (so far), tokens_per_s (since the window opened) and rank_imbalance (the last step's largest
  // rank token count over the ranks' mean), appends it to the history, opens the next
  // window and returns it. Reads the window's device values (the one host sync of a log point).
  StepMetrics close(StepMetrics line);

  const std::vector<double>& logged_step_losses() const { return logged_losses_; }  // through the last log
  int64_t logged_tokens() const { return logged_tokens_; }
  const std::vector<nlohmann::json>& history() const { return history_; }
  // The mean rank_imbalance of the history's lines (1.0 without any; lines written before the
  // field existed are left out).
  double mean_rank_imbalance() const;

  MetricsState state() const;  // reads the open window's device values
  // Continues from a saved state: the steps after the last history line form the open window.
  void load_state(const MetricsState& state);

 private:
  at::Device device_;
  std::vector<std::string> metric_names_;
  std::vector<at::Tensor> window_metrics_;  // per-step objective metrics ((M) fp64) since the last log
  std::vector<at::Tensor> window_losses_;  // per-step global mean loss (fp64 device scalars) since the last log
  at::Tensor window_tokens_;               // fp64 device scalar: non-padding tokens since the last log, all ranks
  at::Tensor last_rank_tokens_;            // (world) fp64: each rank's non-padding tokens in the last step
  std::chrono::steady_clock::time_point window_start_;
  std::vector<double> logged_losses_;
  int64_t logged_tokens_ = 0;
  std::vector<nlohmann::json> history_;
};

}  // namespace finetune
