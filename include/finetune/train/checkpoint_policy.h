// When the trainer evaluates and saves, which evaluation was the best, and when to stop early:
// HF TrainingArguments' eval_strategy / save_strategy (steps|epoch|no), metric_for_best_model /
// greater_is_better / load_best_model_at_end, and EarlyStoppingCallback's patience and threshold.
// Pure: decisions are functions of the step and of the (all-reduced, so rank-identical) evaluation
// results, so every rank reaches the same decision without a collective of its own.
//
// Note [Evaluation and save timing]
// As HF's DefaultFlowCallback: "steps" evaluates when step % eval_steps == 0 and saves when
// step % save_steps == 0, and at the last step both (the evaluation unless that step already had
// one, and after that step's save and log line: the run's summary holds it, as before these
// options existed; the save when save_steps > 0); "epoch" at every epoch's last step and at the last step
// (HF's on_epoch_end also runs when max_steps ends an epoch early); "no" never. finetune's
// eval_steps 0 (its default) means the last step only, as before these options existed.
// Early stopping is HF's order exactly: the callback compares an evaluation with the best metric
// BEFORE the trainer records it (_evaluate runs on_evaluate, then _determine_best_metric): the
// patience counter resets when the metric beats the best by more than the threshold, else grows,
// and training stops after the step whose evaluation brings it to the patience.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace finetune {

enum class IntervalStrategy { No, Steps, Epoch };

// "no", "steps", "epoch" (HF's IntervalStrategy values), in IntervalStrategy's order; inline so
// the option parser (LibTorch-free) reads the same list.
inline const std::vector<std::string>& interval_strategy_names() {
  static const std::vector<std::string> names = {"no", "steps", "epoch"};
  return names;
}
IntervalStrategy interval_strategy_from_name(const std::string& name);  // Error for another name
const std::string& interval_strategy_name(IntervalStrategy strategy);

struct CheckpointPolicyConfig {
  IntervalStrategy eval_strategy = IntervalStrategy::Steps;
  int64_t eval_steps = 0;  // steps: 0 = at the last step only
  IntervalStrategy save_strategy = IntervalStrategy::Steps;
  int64_t save_steps = 0;  // steps: 0 = no checkpoints
  bool greater_is_better = false;      // for the metric (eval_loss: false)
  int64_t early_stopping_patience = 0; // 0: no early stopping
  double early_stopping_threshold = 0.0;
};

class CheckpointPolicy {
 public:
  CheckpointPolicy(const CheckpointPolicyConfig& config, int64_t steps_per_epoch, int64_t total_steps);

  bool evaluate_at(int64_t step) const;
  // The "steps" strategy's evaluation at the end of training, when `last_step` (the step training
  // ended after) is the last and had no evaluation of its own.
  bool evaluate_after_training(int64_t last_step) const;
  bool save_at(int64_t step) const;
  // Records the evaluation of `step` (Note [Evaluation and save timing]: patience, then best).
  void record_evaluation(int64_t step, double metric);
  bool should_stop() const;  // early stopping's patience ran out

  std::optional<double> best_metric() const { return best_metric_; }
  std::optional<int64_t> best_step() const { return best_step_; }
  int64_t patience_counter() const { return patience_counter_; }

  // Replays the evaluations of a resumed run's log history (lines with "step" and "eval_loss"):
  // the best metric, its step and the patience counter are functions of them.
  void replay(const std::vector<nlohmann::json>& log_history);

 private:
  bool at_interval(IntervalStrategy strategy, int64_t interval, int64_t step) const;

  CheckpointPolicyConfig config_;
  int64_t steps_per_epoch_;
  int64_t total_steps_;
  std::optional<double> best_metric_;
  std::optional<int64_t> best_step_;
  int64_t patience_counter_ = 0;
};

}  // namespace finetune
