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
// layers run the eager expression: padded batches with their mask, padding-free batches as
// batched packed attention (Note [Batched packed attention]).
//
// Note [Batched packed attention]
// A padding-free row holds many samples (about 10 per 2048-token row at the benchmark's lengths);
// attending sample by sample costs a dozen small launches per sample and layer. Instead the
// samples are grouped, longest first, into chunks run as one batch each: the chunk's q, k, v are
// gathered into (S, H, Lmax, D) by one index_select each (a padding slot reads its sample's first
// token), eager_attention runs on the batch with a mask that is each sample's own causal (and
// windowed) square, and one index_select puts the real rows back in the packed order. A real query
// never sees a padding key (its weight is exactly 0), a padding query sees its own slot only among
// the padding (softmax stays finite) and its output is dropped, so padding adds exact zeros to
// the gradients. Per element the math is the per-sample path's; only the matmuls' and softmax's
// reduction order may differ with the batch shape (fp32: within 1e-6, tests/model).
// A sample joins the chunk being built while (a) the chunk's padded score area, samples x Lmax^2,
// stays within PackedAttentionLimits::max_padded_area times its samples' own sum of length^2 (the
// per-sample path's area), bounding the extra score memory and flops, and (b) its fp32 scores,
// samples x heads x Lmax^2 x 4 bytes, stay within chunk_bytes; a sample alone is always a chunk.
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

// How packed samples are grouped into chunks (Note [Batched packed attention]).
struct PackedAttentionLimits {
  double max_padded_area = 1.5;        // a chunk's samples x Lmax^2 over its samples' sum of length^2
  int64_t chunk_bytes = int64_t{256} << 20;  // a chunk's fp32 scores: samples x heads x Lmax^2 x 4
};

// One chunk's samples: indices into the row's sample_lengths, longest first (ties in row order).
struct PackedSampleGroup {
  std::vector<int64_t> samples;
  int64_t longest = 0;
};

// The row's non-empty samples grouped under `limits` for attention with `heads` query heads: a
// pure function of the lengths (host side). Throws on a negative length.
std::vector<PackedSampleGroup> group_packed_samples(const std::vector<int64_t>& sample_lengths, int64_t heads,
                                                    const PackedAttentionLimits& limits);

// One chunk on the device: where its (S, Lmax) slots read the packed row, and what they attend to.
struct PackedAttentionChunk {
  int64_t samples = 0;
  int64_t longest = 0;
  at::Tensor gather;   // (S * Lmax) long: the packed token each slot reads
  at::Tensor allowed;  // (S, 1, Lmax, Lmax) bool: each sample's causal (windowed) square
};

// A padding-free row's chunks and the way back: built once per forward and kind of layer (the
// window is in `allowed`) and shared by that kind's layers.
struct PackedAttentionPlan {
  int64_t tokens = 0;  // N, the row's length
  std::vector<PackedAttentionChunk> chunks;
  at::Tensor output_rows;  // (N) long: packed token n's row among the chunks' concatenated slots
};

// The plan for a row of samples of `sample_lengths` (empty samples skipped), for `heads` query
// heads and the spec's window, its index tensors on `device` (one host-to-device copy).
PackedAttentionPlan plan_packed_attention(const std::vector<int64_t>& sample_lengths, int64_t heads,
                                          const AttentionSpec& spec, const at::Device& device,
                                          const PackedAttentionLimits& limits = {});

// A padding-free row: q (N, H, D), k, v (N, KV, D) of the plan's samples, each attending causally
// (and within the window) to itself only -> (N, H, D): eager_attention per chunk of the plan
// (Note [Batched packed attention]). Throws when N is not the plan's token count.
at::Tensor packed_eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const PackedAttentionPlan& plan, const AttentionSpec& spec);

}  // namespace finetune
