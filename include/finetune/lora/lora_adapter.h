// One LoRA adapter on a frozen projection (Note [Projection seam] in model/linear.h), as PEFT's
// lora.Linear computes it:
//   y = base(x) + lora_B(lora_A(dropout(x.to(fp32)))) * scaling,   then cast back to base dtype
// lora_A: (r, in_features), lora_B: (out_features, r), both fp32 (PEFT's autocast_adapter_dtype),
// scaling = lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA.
// Under a KernelPolicy with half_precision_lora, inputs in bf16/fp16 take the one-node GEMM path
// of half_precision_lora_linear.h instead (unless dropout draws a mask this call).
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "finetune/model/kernel_policy.h"
#include "finetune/model/linear.h"

namespace finetune {

struct HalfPrecisionOperands;  // half_precision_lora_linear.h

class LoraAdapter : public LinearAdapter {
 public:
  at::Tensor lora_A;  // (r, in_features) fp32, requires grad
  at::Tensor lora_B;  // (out_features, r) fp32, requires grad
  double scaling = 1.0;
  double dropout = 0.0;
  KernelPolicy kernels;  // the model's, copied when attached
  // Half-precision copies of lora_A/lora_B for the GEMMs, rebuilt when either changes (their
  // version counters move at every optimizer step); see half_precision_lora_linear.h.
  mutable std::shared_ptr<const HalfPrecisionOperands> half_precision_operands;
  // Whether those copies are kept between forwards (4 bytes per adapter weight), or split again in
  // every forward (and recompute) that reads them and freed with its layer's saved tensors
  // (--lora_operand_cache false: Note [Operands split per use] in half_precision_lora_linear.cpp).
  bool cache_operands = true;

  at::Tensor forward(const Linear& base, const at::Tensor& x, bool training) const override;
  // half_precision_lora_swiglu_linear where the one-node path runs (uses_half_precision_path) with
  // the fused SwiGLU kernels (kernels.fused_elementwise) on gate and up they take (fused_swiglu_supported).
  at::Tensor forward_swiglu(const Linear& base, const at::Tensor& gate, const at::Tensor& up,
                            bool training) const override;
  bool draws_random_numbers() const override { return dropout > 0; }
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;
  at::Tensor merged_weight(const Linear& base) const override;
  void refresh_derived_tensors(at::ScalarType dtype) const override;
  bool cuda_graph_safe() const override { return dropout == 0; }

  // Whether forward(x) runs half_precision_lora_linear.
  bool uses_half_precision_path(const at::Tensor& x, bool training) const;
};

// The low-rank update for `x` (..., in_features) in fp32: (..., out_features).
// `training` enables dropout.
at::Tensor lora_delta(const LoraAdapter& adapter, const at::Tensor& x, bool training);

}  // namespace finetune
