// A frozen Linear layer (HF nn.Linear weights) with an optional LoRA adapter attached.
#pragma once

#include <memory>

#include <ATen/ATen.h>

#include "finetune/lora/lora_adapter.h"

namespace finetune {

struct Linear {
  at::Tensor weight;  // (out_features, in_features), model dtype
  at::Tensor bias;    // (out_features) or undefined
  std::unique_ptr<LoraAdapter> lora;

  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }
};

// x: (..., in_features) -> (..., out_features) in x's dtype.
at::Tensor linear_forward(const Linear& layer, const at::Tensor& x, bool training);

}  // namespace finetune
