// A projection of the decoder (HF's nn.Linear): a frozen base weight and, optionally, an adapter.
//
// Note [Projection seam]
// The base-weight kind (a dense tensor in the model dtype, or 4-bit NF4 as bitsandbytes stores
// it) and the adapter (none, LoRA, DoRA) vary independently. model/ owns this interface and knows
// nothing of any adapter: adapters implement LinearAdapter elsewhere (lora/) and reach the base
// weight only through Linear's own methods (dense_weight, base_forward), so a base-weight kind
// changes this file and linear.cpp, not the adapters.
//
// Note [4-bit base weights]
// A 4-bit projection keeps only its NF4 codes and statistics (quant/nf4.h); the weight exists in
// the compute dtype only for the GEMM that reads it: dense_weight() dequantizes, and the 4-bit
// base product (quantized_linear.h) dequantizes again in backward instead of saving the 16-bit
// weight, so at most one layer's projections are dense at a time (as bitsandbytes' MatMul4Bit).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

struct Linear;
struct Nf4Weight;  // quant/nf4.h

class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  // base(x) plus the adapter's update, as the adapter's reference implementation forms the sum.
  // x (..., in_features) -> (..., out_features) in x's dtype; `training` enables dropout.
  virtual at::Tensor forward(const Linear& base, const at::Tensor& x, bool training) const = 0;
  // forward(base, silu(gate) * up, training) for the down projection of a SwiGLU MLP, where the
  // adapter can form the product from gate and up itself and keep those two instead of it for its
  // backward (lora/half_precision_lora_linear.h, Note [SwiGLU into the down projection]); gate and
  // up are the caller's to give: its backward writes their gradients over them. Undefined where the
  // adapter cannot (then the caller forms the product and calls forward). None by default.
  virtual at::Tensor forward_swiglu(const Linear& base, const at::Tensor& gate, const at::Tensor& up,
                                    bool training) const {
    return {};
  }
  // Whether forward(training=true) draws random numbers (a layer recompute must then replay them).
  virtual bool draws_random_numbers() const = 0;
  // The adapter's trainable tensors, named relative to the projection (PEFT: "lora_A.weight").
  virtual std::vector<std::pair<std::string, at::Tensor>> named_parameters() const = 0;
  // The base weight with the update folded in, in the base weight's dtype (PEFT's merge).
  virtual at::Tensor merged_weight(const Linear& base) const = 0;
  // Brings what the adapter derives from its parameters and keeps between forwards up to date for
  // inputs of `dtype`, in place: a replayed CUDA graph reads those tensors at the addresses it
  // captured and runs no host code that would refresh them (train/micro_step_graphs.h).
  virtual void refresh_derived_tensors(at::ScalarType dtype) const {}
  // Whether micro-steps through this adapter may be captured as CUDA graphs and replayed: no
  // random draws, nothing kept between forwards but what refresh_derived_tensors refreshes, and a
  // capture verified on a GPU (tests/cuda). No by default.
  virtual bool cuda_graph_safe() const { return false; }
};

struct Linear {
  at::Tensor weight;  // (out_features, in_features), model dtype; a meta tensor (shape only) when 4-bit
  std::shared_ptr<const Nf4Weight> weight_4bit;  // the 4-bit base weight, or null when dense
  at::ScalarType compute_dtype = at::kFloat;    // the model dtype, in which a 4-bit weight is used
  at::Tensor bias;    // (out_features) or undefined
  std::unique_ptr<LinearAdapter> adapter;

  bool is_4bit() const { return weight_4bit != nullptr; }
  int64_t in_features() const;
  int64_t out_features() const;
  // The base weight as a dense (out, in) tensor in the compute dtype (a 4-bit one dequantized:
  // a fresh tensor each call, so never keep it beyond the product it feeds).
  at::Tensor dense_weight() const;
  // x W^T + b without the adapter.
  at::Tensor base_forward(const at::Tensor& x) const;
};

// x: (..., in_features) -> (..., out_features) in x's dtype, through the adapter when there is one.
inline at::Tensor linear_forward(const Linear& layer, const at::Tensor& x, bool training) {
  return layer.adapter ? layer.adapter->forward(layer, x, training) : layer.base_forward(x);
}

}  // namespace finetune
