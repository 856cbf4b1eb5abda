// The attention computations between the projections that the model's kernels choose from
// (causal_lm.cpp), for what a layer asks of attention (AttentionSpec): its scale, Gemma-2's logit
// soft-cap, and a sliding window.
//
// Note [Sliding window]
// transformers' sliding_window_overlay: query i attends to key j iff i - window < j <= i, i.e.
// the last `window` positions, itself included, counted by index in the row (in a packed or
// left-padded row that is the distance within the sample, since samples are contiguous). Flash
// attention's window_size_left is therefore window - 1. A row no longer than the window attends
// exactly as full causal attention.
//
// Note [Soft-capped attention]
// Gemma-2 caps the scaled scores, c * tanh(s / c), before the mask and softmax
// (eager_attention_forward in modeling_gemma2.py; transformers' SDPA path ignores the cap, so the
// references are eager). No ATen kernel (SDPA, flash, efficient) takes a cap, so soft-capped
// layers run the eager expression: padded batches with their mask, padding-free batches sample by
// sample over the packed row (each sample's causal, windowed square; no padding is added).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/model/attention_mask.h"

namespace finetune {

struct AttentionSpec {
  double scale = 1.0;                 // on q k^T
  std::optional<double> softcap;      // Note [Soft-capped attention]
  std::optional<int64_t> window;      // Note [Sliding window]
};

// The attention of a full or a sliding layer (layer_is_sliding, model_config.h): scale
// head_dim^-0.5 or query_pre_attn_scalar^-0.5, the config's attention soft-cap, and for a sliding
// layer the config's window.
AttentionSpec attention_spec(const ModelConfig& config, bool sliding);

// The bool mask (B, 1, T, S) (true: attend) for `mask` restricted to the window, with the keys'
// index offset by `past` (a KV-cached forward); `mask` (B|1, 1, T, S) or undefined for plain
// causal attention. A padding query keeps its own key (the mask's rule: softmax stays finite).
at::Tensor sliding_window_keys(const at::Tensor& mask, int64_t window, int64_t queries, int64_t past,
                               const at::Device& device);

// mask with the window applied (AttentionMask::mask), or mask itself when every row fits in it.
AttentionMask with_sliding_window(const AttentionMask& mask, int64_t window, int64_t seq_len,
                                  const at::Device& device);

// Flash attention's (window_size_left, window_size_right) for the spec: (window - 1, 0), or none.
std::pair<std::optional<int64_t>, std::optional<int64_t>> flash_window(const AttentionSpec& spec);

// The causal bool mask (1, 1, T, past + T): query t attends to keys j <= past + t.
at::Tensor causal_keys(int64_t queries, int64_t past, const at::Device& device);

// transformers' eager attention: q (B, H, T, D), k, v (B, KV, S, D), allowed (B|1, 1, T, S) bool
// -> (B, H, T, D). Scores scaled, soft-capped, masked, softmax in fp32, cast to q's dtype; the
// spec's window is already in `allowed`.
at::Tensor eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed,
                           const AttentionSpec& spec);

// A padding-free row: q (N, H, D), k, v (N, KV, D) of samples of `sample_lengths` (sum N), each
// attending causally (and within the window) to itself only -> (N, H, D), by eager_attention per
// sample.
at::Tensor packed_eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::vector<int64_t>& sample_lengths, const AttentionSpec& spec);

}  // namespace finetune
