// A projection of the decoder (HF's nn.Linear): a frozen base weight and, optionally, an adapter.
//
// Note [Projection seam]
// The base-weight kind (today a dense tensor in the model dtype; 4-bit NF4 next) and the adapter
// (none, LoRA, DoRA next) vary independently. model/ owns this interface and knows nothing of
// any adapter: adapters implement LinearAdapter elsewhere (lora/) and reach the base weight only
// through Linear's own methods, so a new base-weight kind changes this file, not the adapters.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

struct Linear;

class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  // base(x) plus the adapter's update, as the adapter's reference implementation forms the sum.
  // x (..., in_features) -> (..., out_features) in x's dtype; `training` enables dropout.
  virtual at::Tensor forward(const Linear& base, const at::Tensor& x, bool training) const = 0;
  // Whether forward(training=true) draws random numbers (a layer recompute must then replay them).
  virtual bool draws_random_numbers() const = 0;
  // The adapter's trainable tensors, named relative to the projection (PEFT: "lora_A.weight").
  virtual std::vector<std::pair<std::string, at::Tensor>> named_parameters() const = 0;
  // The base weight with the update folded in, in the base weight's dtype (PEFT's merge).
  virtual at::Tensor merged_weight(const Linear& base) const = 0;
};

struct Linear {
  at::Tensor weight;  // (out_features, in_features), model dtype
  at::Tensor bias;    // (out_features) or undefined
  std::unique_ptr<LinearAdapter> adapter;

  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }
  // The base weight as a dense (out, in) tensor in the compute dtype.
  const at::Tensor& dense_weight() const { return weight; }
  // x W^T + b without the adapter.
  at::Tensor base_forward(const at::Tensor& x) const { return at::linear(x, dense_weight(), bias); }
};

// x: (..., in_features) -> (..., out_features) in x's dtype, through the adapter when there is one.
inline at::Tensor linear_forward(const Linear& layer, const at::Tensor& x, bool training) {
  return layer.adapter ? layer.adapter->forward(layer, x, training) : layer.base_forward(x);
}

}  // namespace finetune
