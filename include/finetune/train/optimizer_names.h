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
inline constexpr const char* kSgdName = "sgd";                  // torch.optim.SGD (train/sgd.h)
inline constexpr const char* kAdafactorName = "adafactor";      // transformers' Adafactor (train/adafactor.h)

inline const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {kAdamWTorchName, kAdamW8bitName, kSgdName, kAdafactorName};
  return names;
}

// HF's other spellings of the same updates: adamw_torch_fused (the fused kernel is an HF detail),
// adamw_bnb_8bit, paged_adamw_8bit (paging moves bnb's state between host and GPU under memory
// pressure; it does not change the update, and finetune's state stays on the GPU), and
// paged_adamw_32bit, bitsandbytes' 32-bit AdamW, whose
// update is AdamW's (fp32 moments, decoupled decay, bias correction) up to rounding
// (tests/train/test_sgd_adafactor.cpp compares it with bnb's PagedAdamW32bit).
inline const std::vector<std::pair<std::string, std::string>>& optimizer_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"adamw_torch_fused", kAdamWTorchName}, {"adamw_bnb_8bit", kAdamW8bitName}, {"paged_adamw_8bit", kAdamW8bitName},
      {"paged_adamw_32bit", kAdamWTorchName}};
  return aliases;
}

// HF's OptimizerNames that finetune does not offer, with the reason (the option parser's refusal).
inline const std::vector<std::pair<std::string, std::string>>& unsupported_optimizers() {
  static const std::string reason = "not implemented; finetune offers adamw_torch, adamw_8bit, sgd and adafactor";
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"adamw_torch_xla", reason}, {"adamw_torch_npu_fused", reason}, {"adamw_apex_fused", reason},
      {"adamw_anyprecision", reason}, {"adagrad", reason}, {"rmsprop", reason}, {"rmsprop_bnb", reason},
      {"lion_8bit", reason}, {"lion_32bit", reason}, {"paged_lion_8bit", reason}, {"paged_lion_32bit", reason},
      {"ademamix", reason}, {"paged_ademamix_32bit", reason}, {"galore_adamw", reason}, {"lomo", reason},
      {"adalomo", reason}, {"grokadamw", reason}, {"schedule_free_adamw", reason}, {"stable_adamw", reason},
      {"apollo_adamw", reason}};
  return names;
}

}  // namespace finetune
