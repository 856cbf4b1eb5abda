// --optim's values and HF's aliases for them: one list for make_optimizer (train/optimizer.h),
// the checkpoints, the option parser and its help. Header-only and LibTorch-free, so the option
// parser can use it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace finetune {

inline constexpr const char* kAdamWTorchName = "adamw_torch";  // torch.optim.AdamW (train/adamw.h)
inline constexpr const char* kAdamW8bitName = "adamw_8bit";    // bitsandbytes' 8-bit AdamW (train/adamw_8bit.h)

inline const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {kAdamWTorchName, kAdamW8bitName};
  return names;
}

// HF's other spellings of the same updates: adamw_torch_fused (the fused kernel is an HF detail),
// adamw_bnb_8bit, paged_adamw_8bit (paging moves bnb's state between host and GPU under memory
// pressure; it does not change the update, and finetune's state stays on the GPU).
inline const std::vector<std::pair<std::string, std::string>>& optimizer_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"adamw_torch_fused", kAdamWTorchName}, {"adamw_bnb_8bit", kAdamW8bitName}, {"paged_adamw_8bit", kAdamW8bitName}};
  return aliases;
}

}  // namespace finetune
