#include "finetune/train/checkpoint_policy.h"

#include <cmath>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {

IntervalStrategy interval_strategy_from_name(const std::string& name) {
  if (name == "no") return IntervalStrategy::No;
  if (name == "steps") return IntervalStrategy::Steps;
  if (name == "epoch") return IntervalStrategy::Epoch;
  throw Error("unknown strategy \"" + name + "\" (expected " + join(interval_strategy_names(), ", ") + ")");
}

const std::string& interval_strategy_name(IntervalStrategy strategy) {
  return interval_strategy_names().at(static_cast<size_t>(strategy));
}

CheckpointPolicy::CheckpointPolicy(const CheckpointPolicyConfig& config, int64_t steps_per_epoch, int64_t total_steps)
    : config_(config), steps_per_epoch_(steps_per_epoch), total_steps_(total_steps) {
  if (steps_per_epoch_ <= 0) throw Error("checkpoint policy: steps per epoch must be positive");
}

bool CheckpointPolicy::at_interval(IntervalStrategy strategy, int64_t interval, int64_t step) const {
  switch (strategy) {
    case IntervalStrategy::No:
      return false;
    case IntervalStrategy::Steps:
      return interval > 0 && step % interval == 0;
    case IntervalStrategy::Epoch:
      return step % steps_per_epoch_ == 0 || step == total_steps_;
  }
  return false;
}

bool CheckpointPolicy::evaluate_at(int64_t step) const {
  return at_interval(config_.eval_strategy, config_.eval_steps, step);
}

bool CheckpointPolicy::evaluate_after_training(int64_t last_step) const {
  return last_step == total_steps_ && config_.eval_strategy == IntervalStrategy::Steps && !evaluate_at(last_step);
}

bool CheckpointPolicy::save_at(int64_t step) const {
  const bool last_step =
      step == total_steps_ && config_.save_strategy == IntervalStrategy::Steps && config_.save_steps > 0;
  return at_interval(config_.save_strategy, config_.save_steps, step) || last_step;
}

void CheckpointPolicy::record_evaluation(int64_t step, double metric) {
  // EarlyStoppingCallback.check_metric_value, against the best before this evaluation.
  const bool better = best_metric_ && (config_.greater_is_better ? metric > *best_metric_ : metric < *best_metric_);
  if (!best_metric_ || (better && std::abs(metric - *best_metric_) > config_.early_stopping_threshold)) {
    patience_counter_ = 0;
  } else {
    ++patience_counter_;
  }
  // Trainer._determine_best_metric: strictly better than the best so far (the first always is).
  if (!best_metric_ || better) {
    best_metric_ = metric;
    best_step_ = step;
  }
}

bool CheckpointPolicy::should_stop() const {
  return config_.early_stopping_patience > 0 && patience_counter_ >= config_.early_stopping_patience;
}

void CheckpointPolicy::replay(const std::vector<nlohmann::json>& log_history) {
  for (const auto& line : log_history) {
    if (!line.contains("eval_loss") || !line.at("eval_loss").is_number() || !line.contains("step")) continue;
    record_evaluation(line.at("step").get<int64_t>(), line.at("eval_loss").get<double>());
  }
}

}  // namespace finetune
