// Which TensorBoard scalars a metrics.jsonl line and the end-of-run summary become, under HF
// Trainer's tag names: TensorBoardCallback passes each log through rewrite_logs
// (transformers/integrations/integration_utils.py), "eval_" + name -> "eval/" + name, every
// other key -> "train/" + key. Each field is first given the key HF logs it under:
//   metrics.jsonl  loss -> loss, lr -> learning_rate, grad_norm -> grad_norm, epoch -> epoch,
//                  tokens -> num_input_tokens_seen, tokens_per_s -> tokens_per_second,
//                  elapsed_s -> elapsed_s (HF has no per-log runtime), eval_loss -> eval_loss,
//                  rank_imbalance -> rank_imbalance (HF has none)
//   summary        train_loss -> train_loss, elapsed_s -> train_runtime,
//                  tokens_per_s -> train_tokens_per_second, eval_loss -> eval_loss
// so that, e.g., metrics.jsonl's "lr" is TensorBoard's "train/learning_rate".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "finetune/report/tensorboard_writer.h"
#include "finetune/report/metrics.h"

namespace finetune {

// HF's rewrite_logs rule for one key.
std::string tensorboard_tag(const std::string& hf_key);

// Every numeric field of one metrics.jsonl line (eval/loss only when an evaluation ran).
std::vector<ScalarValue> step_scalars(const StepMetrics& metrics);

// The end-of-run figures HF's Trainer logs once training ends.
struct RunSummaryMetrics {
  double train_loss = 0;     // mean loss over the run's steps (TrainResult::train_loss)
  double runtime_s = 0;
  double tokens_per_s = 0;
  std::optional<double> eval_loss;  // the final evaluation, when no metrics.jsonl line carries it
};
std::vector<ScalarValue> summary_scalars(const RunSummaryMetrics& summary);

}  // namespace finetune
