// Rotary position embeddings as transformers computes them (LlamaRotaryEmbedding +
// apply_rotary_pos_emb), including "linear", "llama3", "yarn" and "dynamic" (NTK) frequency
// scaling, and Phi-3's
// (Phi3RotaryEmbedding): "longrope" and partial rotary (RoPE on the first rotary_dim dims of each
// head, the rest passed through).
#pragma once

#include <optional>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"

namespace finetune {

// int(head_dim * partial_rotary_factor): head_dim unless the config rotates part of each head.
int64_t rope_rotary_dim(const ModelConfig& config);

// inv_freq: (rotary_dim / 2) fp32 on `device`, with the config's rope scaling applied (longrope:
// its short factors, the table transformers builds at init).
at::Tensor rope_inverse_frequencies(const ModelConfig& config, const at::Device& device);

// longrope's inv_freq: 1 / (factor * theta^(2i / rotary_dim)) with the short or long factors.
at::Tensor longrope_inverse_frequencies(const ModelConfig& config, const at::Device& device, bool long_factors);

// The factor transformers multiplies cos and sin by: longrope's attention_factor (given, else
// sqrt(1 + ln(factor) / ln(original_max_position_embeddings)) when factor > 1); yarn's (given,
// else from factor, mscale and mscale_all_dim: 0.1 * ln(factor) + 1 and its mscale forms); else 1.
double rope_attention_scaling(const ModelConfig& config);

// dynamic (NTK) RoPE past max_position_embeddings, as transformers' dynamic_frequency_update
// recomputes it from a forward's length: base = theta * (factor * L / max_position_embeddings -
// (factor - 1)) ^ (dim / (dim - 2)) in fp32 on the device, L = max(position_ids) + 1.
struct DynamicNtk {
  double rope_theta = 10000.0;
  double factor = 1.0;
  int64_t max_position_embeddings = 0;
  int64_t rotary_dim = 0;
};
// seq_len: 0-dim int64 on the device -> (rotary_dim / 2) fp32 for that length.
at::Tensor dynamic_ntk_inverse_frequencies(const DynamicNtk& ntk, const at::Tensor& seq_len);

// A model's frequencies. longrope keeps both tables and picks per forward, as transformers'
// longrope_frequency_update does: the long ones when max(position_ids) + 1 exceeds
// original_max_position_embeddings, else the short ones (selected on the device). dynamic
// recomputes them per forward past max_position_embeddings (selected on the device too). A
// transformers model keeps the frequencies of the longest forward so far until a forward shorter
// than max_position_embeddings resets them; here each forward's own length decides, which is
// what transformers computes for a fresh model and for lengths that only grow.
struct RopeFrequencies {
  at::Tensor inv_freq;       // (rotary_dim / 2) fp32
  at::Tensor long_inv_freq;  // longrope only; undefined otherwise
  int64_t original_max_position_embeddings = 0;
  double attention_scaling = 1.0;
  std::optional<DynamicNtk> dynamic_ntk;  // dynamic only
};
RopeFrequencies rope_frequencies(const ModelConfig& config, const at::Device& device);

struct RopeTables {
  at::Tensor cos;  // (B, T, rotary_dim) in the model dtype
  at::Tensor sin;  // (B, T, rotary_dim)
};

// position_ids: (B, T) int64. cos and sin are scaled by attention_scaling (before the cast).
RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& position_ids, at::ScalarType dtype,
                       double attention_scaling = 1.0);
RopeTables rope_tables(const RopeFrequencies& frequencies, const at::Tensor& position_ids, at::ScalarType dtype);

// x: (B, T, H, head_dim), heads after tokens (the projection's own layout, so the elementwise
// kernels read contiguous memory); rotates pairs (i, i + head_dim/2) like HF's rotate_half, with
// the same operations on the same values as HF's (B, H, T, head_dim) layout.
// fused_kernel (KernelPolicy::fused_elementwise): one CUDA kernel each way (fused_kernels.h).
// Tables narrower than head_dim rotate the first rotary_dim dims and pass the rest through, as
// Phi-3's apply_rotary_pos_emb; that case always runs the ATen expressions.
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables, bool fused_kernel);

}  // namespace finetune
