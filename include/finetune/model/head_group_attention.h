// Padding-free flash attention over one KV head's query heads at a time, for long rows.
//
// Note [Head-grouped flash attention]
// Flash attention's backward on a padding-free row of N tokens allocates, beside its outputs, an
// fp32 accumulator for the query gradient (N x H x D x 4 bytes) and, when the model groups query
// heads onto fewer KV heads, the key and value gradients expanded to every query head before they
// are summed (2 x N x H x D x 2 bytes): 32 KB a token on an 8B model (32 heads of 128), a quarter
// of what one layer's backward holds at any length, and at 512k tokens 16 GiB. The heads are
// independent, so the same kernels run one KV head and its query heads at a time, forward and
// backward, inside one autograd node: the scratch and the per-call outputs are one group's
// (1/KV of them), written into the full-size results between calls. Each head's arithmetic is the
// single call's, with the same kernel for the head dimension: the output and the key and value
// gradients are bit for bit the single call's; the query gradient's fp32 accumulation is atomic
// (its order is not fixed, in one call as in several). More launches per layer (KV instead of
// one): chosen only when the scratch would exceed kHeadGroupAttentionBytes (about 32k tokens on
// an 8B model), so ordinary rows keep the single call.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>

namespace finetune {

// Above this much backward scratch (head_group_attention_scratch_bytes) attention runs per KV head.
constexpr int64_t kHeadGroupAttentionBytes = int64_t{1} << 30;

// Flash attention's backward scratch for a padding-free row: the fp32 query-gradient accumulator,
// plus the expanded key and value gradients when kv_heads < heads (elements of `element_bytes`).
int64_t head_group_attention_scratch_bytes(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                           int64_t element_bytes);

// What one flash call needs besides q, k, v: the samples' boundaries and the attention's shape.
struct FlashVarlenArgs {
  at::Tensor cu_seqlens;  // (samples + 1) int32, on the device
  int64_t max_seqlen = 0;
  double scale = 1.0;
  std::optional<int64_t> window_left;   // flash_window (Note [Sliding window])
  std::optional<int64_t> window_right;
};

// Causal padding-free flash attention, q (N, H, D), k, v (N, KV, D) -> (N, H, D), run one KV head
// (and its H / KV query heads) at a time in forward and backward (Note [Head-grouped flash
// attention]). CUDA, bf16/fp16, as at::_flash_attention_forward. Throws when H is not a multiple
// of KV.
at::Tensor head_grouped_flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const FlashVarlenArgs& args);

}  // namespace finetune
