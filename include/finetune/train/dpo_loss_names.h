// --loss_type's values (dpo): one list for train/preference_loss.h's DpoLossType, the option parser
// and its help. Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <string>
#include <vector>

namespace finetune {

// TRL 1.16's DPOConfig.loss_type names that finetune computes, in DpoLossType's order.
inline const std::vector<std::string>& dpo_loss_type_names() {
  static const std::vector<std::string> names = {"sigmoid", "hinge", "ipo", "robust"};
  return names;
}

}  // namespace finetune
