// One LoRA adapter on a frozen Linear, as PEFT's lora.Linear computes it:
//   y = base(x) + lora_B(lora_A(dropout(x.to(fp32)))) * scaling,   then cast back to base dtype
// lora_A: (r, in_features), lora_B: (out_features, r), both fp32 (PEFT's autocast_adapter_dtype),
// scaling = lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA.
#pragma once

#include <ATen/ATen.h>

#include <memory>

namespace finetune {

struct HalfPrecisionOperands;  // half_precision_lora_linear.h

struct LoraAdapter {
  at::Tensor lora_A;  // (r, in_features) fp32, requires grad
  at::Tensor lora_B;  // (out_features, r) fp32, requires grad
  double scaling = 1.0;
  double dropout = 0.0;
  // Half-precision copies of lora_A/lora_B for the GEMMs, rebuilt when either changes (their
  // version counters move at every optimizer step); see half_precision_lora_linear.h.
  mutable std::shared_ptr<const HalfPrecisionOperands> half_precision_operands;
};

// The low-rank update for `x` (..., in_features) in fp32: (..., out_features).
// `training` enables dropout.
at::Tensor lora_delta(const LoraAdapter& adapter, const at::Tensor& x, bool training);

}  // namespace finetune
