// One DoRA adapter (weight-decomposed LoRA) on a frozen projection (Note [Projection seam] in
// model/linear.h), as PEFT 0.21's lora.Linear with use_dora=True computes it (DoraLinearVariant,
// DoraLinearLayer). The adapted weight is W' = m * (W + s B A) / n with n = ||W + s B A||_c, the
// L2 norm of each output row over in_features; the forward never forms W':
//
//   y = base(x) + (m/n - 1) * (x W^T) + (m/n) * (B A x) * s,     n detached (DoRA paper, 4.3)
//
// in fp32 (x cast to the adapters' dtype), the sum cast back to the base dtype. With dropout
// drawn, x W^T is recomputed from the dropped-out x, as PEFT does; otherwise it is base(x) minus
// the bias. lora_A, lora_B, scaling and dropout are a LoraAdapter's, initialised the same way;
// the half-precision one-node path of LoRA is not used: PEFT's expression runs on every device.
#pragma once

#include <ATen/ATen.h>

#include "finetune/lora/lora_adapter.h"
#include "finetune/model/linear.h"

namespace finetune {

class DoraAdapter : public LinearAdapter {
 public:
  // Takes the low-rank pair and starts the magnitude at n (so W' = W while B = 0), as PEFT's
  // DoraLinearLayer.update_layer: the norm is taken in the base weight's dtype, then held in fp32.
  DoraAdapter(LoraAdapter low_rank_pair, const Linear& base);

  LoraAdapter low_rank;              // lora_A, lora_B, scaling, dropout (its own forward is not used)
  at::Tensor lora_magnitude_vector;  // (out_features) fp32, requires grad: m

  at::Tensor forward(const Linear& base, const at::Tensor& x, bool training) const override;
  bool draws_random_numbers() const override { return low_rank.draws_random_numbers(); }
  // lora_A.weight, lora_B.weight, lora_magnitude_vector (PEFT saves the magnitude without ".weight").
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;
  // PEFT's DoRA merge: (m / ||W + s B A||_c) * (W + s B A), summed in fp32, rounded once to W's dtype.
  at::Tensor merged_weight(const Linear& base) const override;
};

}  // namespace finetune
