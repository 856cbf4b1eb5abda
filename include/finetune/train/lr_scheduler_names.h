// --lr_scheduler_type's values: one list for lr_multiplier (train/lr_schedule.h), the option
// parser and its help. Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <string>
#include <vector>

namespace finetune {

// The schedule names lr_multiplier knows (transformers' get_scheduler names).
inline const std::vector<std::string>& lr_scheduler_types() {
  static const std::vector<std::string> types = {"linear", "cosine", "constant", "constant_with_warmup"};
  return types;
}

}  // namespace finetune
