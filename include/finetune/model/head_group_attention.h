// Padding-free attention over one KV head's query heads at a time, for long rows: cuDNN for a row of
// one sample (the default), else flash.
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
//
// Note [Head-grouped cuDNN attention]
// The default for long single-sample rows (KernelPolicy::long_row_attention): the same per-KV-head
// scheme with cuDNN's fused attention (at::_scaled_dot_product_cudnn_attention and its backward)
// in place of flash, for a row that holds exactly one sample and no sliding window: cuDNN's dense
// op takes (B, H, T, D) tensors with neither cu_seqlens nor a window (its varlen op,
// _cudnn_attention_forward, gave wrong values and an illegal memory access at 131k tokens on an
// H200). The group's tensors are (1, H / KV, N, D) and (1, 1, N, D) views of the (N, H, D) rows,
// no copies; cuDNN takes the one KV head with the group's query heads as they are (grouped-query
// attention: sdp_utils accepts fewer KV heads for cuDNN) and returns that KV head's key and value
// gradients. At Llama-3.1-8B's shape on an H100 (bench/attention_backends.py, cudnn_groups against
// flash_varlen) it ran forward + backward at 536 TFLOP/s against flash's 334 at 32k tokens and 523
// against 321 at 262k, with half of flash's scratch, its output and gradients as far from flash's
// at 262k as at 32k (max abs 3.9e-3 / 1.6e-2 / 3.1e-2 / 3.1e-2 for out / dq / dk / dv). At 557,056
// tokens its query gradient was 0.84 from flash's. That row is the only one measured with more than
// 2^31 query elements (524,288 tokens of 32 x 128), so cuDNN takes only rows below that count
// (kCudnnMaxQueryElements) and longer ones run the flash groups; rows between 262k and 524k tokens
// have trained with it (the 393,216-token QLoRA proxy: 13,806 tok/s against flash's 9,950,
// bench/RESULTS.md) but their gradients were not compared with flash's. Chosen where the flash
// groups would be (kHeadGroupAttentionBytes); FINETUNE_LONG_ROW_ATTENTION=flash keeps flash
// (kernel_policy.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

// Above this much backward scratch (head_group_attention_scratch_bytes) attention runs per KV head.
constexpr int64_t kHeadGroupAttentionBytes = int64_t{1} << 30;

// Flash attention's backward scratch for a padding-free row: the fp32 query-gradient accumulator,
// plus the expanded key and value gradients when kv_heads < heads (elements of `element_bytes`).
int64_t head_group_attention_scratch_bytes(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                           int64_t element_bytes);

// The kernel each KV head's group runs (Note [Head-grouped cuDNN attention]); cuDNN unless
// FINETUNE_LONG_ROW_ATTENTION asks for flash (kernel_policy.h).
enum class HeadGroupKernel { kFlash, kCudnn };
constexpr HeadGroupKernel kDefaultHeadGroupKernel = HeadGroupKernel::kCudnn;

// Its name ("flash", "cudnn"), and the kernel of a name (nullopt for any other).
const char* head_group_kernel_name(HeadGroupKernel kernel);
std::optional<HeadGroupKernel> head_group_kernel_named(const std::string& name);

// The most query elements (tokens x heads x head_dim) a row may have for the cuDNN kernel: its query
// gradient went wrong past 2^31 (Note [Head-grouped cuDNN attention]).
constexpr int64_t kCudnnMaxQueryElements = int64_t{1} << 31;

// The kernel for a padding-free row of `row_tokens` tokens holding samples of `sample_lengths` (on
// the host; empty when unknown, as in a graphed micro-step), with `query_width` query elements a
// token (heads x head_dim), in a layer with a sliding window or not, when the kernel policy asks
// for `requested`: cuDNN only for one sample of all the row's tokens, no window (its dense op has
// neither cu_seqlens nor a window) and fewer than kCudnnMaxQueryElements query elements, else flash.
HeadGroupKernel head_group_kernel_for(HeadGroupKernel requested, const std::vector<int64_t>& sample_lengths,
                                      int64_t row_tokens, int64_t query_width, bool windowed);

// What one call needs besides q, k, v: the samples' boundaries, the attention's shape, the kernel.
struct HeadGroupArgs {
  at::Tensor cu_seqlens;  // (samples + 1) int32, on the device
  int64_t max_seqlen = 0;
  double scale = 1.0;
  std::optional<int64_t> window_left;   // flash_window (Note [Sliding window])
  std::optional<int64_t> window_right;
  // kCudnn: cu_seqlens must be [0, N] (one sample of all N tokens), no window and q below
  // kCudnnMaxQueryElements (head_group_kernel_for).
  HeadGroupKernel kernel = HeadGroupKernel::kFlash;
};

// Causal padding-free attention, q (N, H, D), k, v (N, KV, D) -> (N, H, D), run one KV head (and
// its H / KV query heads) at a time in forward and backward with args.kernel (Note [Head-grouped
// flash attention], Note [Head-grouped cuDNN attention]). CUDA, bf16/fp16, as
// at::_flash_attention_forward (or at::_scaled_dot_product_cudnn_attention). Throws when H is not a
// multiple of KV, or for kCudnn when the row is not one sample, has a window or too many query elements.
at::Tensor head_grouped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const HeadGroupArgs& args);

}  // namespace finetune
