// --lr_scheduler_type's values: one list for lr_multiplier (train/lr_schedule.h), the option
// parser and its help. Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace finetune {

// The schedule names lr_multiplier knows (transformers' get_scheduler names, SchedulerType).
inline const std::vector<std::string>& lr_scheduler_types() {
  static const std::vector<std::string> types = {
      "linear",         "cosine",           "constant",           "constant_with_warmup",      "cosine_with_restarts",
      "polynomial",     "inverse_sqrt",     "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay"};
  return types;
}

// transformers' SchedulerType values finetune does not offer, with the reason.
inline const std::vector<std::pair<std::string, std::string>>& unsupported_lr_scheduler_types() {
  static const std::vector<std::pair<std::string, std::string>> types = {
      {"reduce_lr_on_plateau", "it steps on evaluation metrics, not on optimizer steps; not implemented"},
      {"greedy", "it steps on evaluation metrics, not on optimizer steps; not implemented"}};
  return types;
}

}  // namespace finetune
