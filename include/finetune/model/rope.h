// Rotary position embeddings as transformers computes them (LlamaRotaryEmbedding +
// apply_rotary_pos_emb), including "linear" and "llama3" frequency scaling.
#pragma once

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"

namespace finetune {

// inv_freq: (head_dim / 2) fp32 on `device`, with the config's rope scaling applied.
at::Tensor rope_inverse_frequencies(const ModelConfig& config, const at::Device& device);

struct RopeTables {
  at::Tensor cos;  // (B, T, head_dim) in the model dtype
  at::Tensor sin;  // (B, T, head_dim)
};

// position_ids: (B, T) int64.
RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& position_ids, at::ScalarType dtype);

// x: (B, T, H, head_dim), heads after tokens (the projection's own layout, so the elementwise
// kernels read contiguous memory); rotates pairs (i, i + head_dim/2) like HF's rotate_half, with
// the same operations on the same values as HF's (B, H, T, head_dim) layout.
// fused_kernel (KernelPolicy::fused_elementwise): one CUDA kernel each way (fused_kernels.h).
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables, bool fused_kernel);

}  // namespace finetune
