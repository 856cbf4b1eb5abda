#include "finetune/model/head_group_attention.h"

#include <string>
#include <vector>

#include <ATen/core/List.h>
#include <torch/csrc/autograd/custom_function.h>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

// One KV head's slice of (N, heads, D): its `per_group` heads starting at group * per_group.
at::Tensor group_heads(const at::Tensor& t, int64_t group, int64_t per_group) {
  return t.narrow(1, group * per_group, per_group);
}

// The full-size gradients a grouped backward fills group by group, and the grouping of q's heads.
struct GroupedGradients {
  at::Tensor q, k, v;
  int64_t groups = 0;     // KV heads
  int64_t per_group = 0;  // query heads per KV head
};

GroupedGradients empty_gradients(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return {at::empty_like(q), at::empty_like(k), at::empty_like(v), k.size(1), q.size(1) / k.size(1)};
}

struct HeadGroupedFlash : public torch::autograd::Function<HeadGroupedFlash> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const HeadGroupArgs& args) {
    const int64_t groups = k.size(1);
    const int64_t per_group = q.size(1) / groups;
    auto out = at::empty_like(q);
    c10::List<at::Tensor> logsumexp, rng_state, unused;
    for (int64_t g = 0; g < groups; ++g) {
      auto [group_out, group_lse, group_rng, group_unused, debug] = at::_flash_attention_forward(
          group_heads(q, g, per_group), group_heads(k, g, 1), group_heads(v, g, 1), args.cu_seqlens,
          args.cu_seqlens, args.max_seqlen, args.max_seqlen, 0.0, /*is_causal=*/true, /*return_debug_mask=*/false,
          args.scale, args.window_left, args.window_right);
      group_heads(out, g, per_group).copy_(group_out);
      logsumexp.push_back(group_lse);
      rng_state.push_back(group_rng);
      unused.push_back(group_unused);
    }
    ctx->save_for_backward({q, k, v, out, args.cu_seqlens});
    ctx->saved_data["logsumexp"] = logsumexp;
    ctx->saved_data["rng_state"] = rng_state;
    ctx->saved_data["unused"] = unused;
    ctx->saved_data["max_seqlen"] = args.max_seqlen;
    ctx->saved_data["scale"] = args.scale;
    ctx->saved_data["window_left"] = args.window_left ? at::IValue(*args.window_left) : at::IValue();
    ctx->saved_data["window_right"] = args.window_right ? at::IValue(*args.window_right) : at::IValue();
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &cu_seqlens = saved[4];
    const auto logsumexp = ctx->saved_data["logsumexp"].toTensorList();
    const auto rng_state = ctx->saved_data["rng_state"].toTensorList();
    const auto unused = ctx->saved_data["unused"].toTensorList();
    const int64_t max_seqlen = ctx->saved_data["max_seqlen"].toInt();
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto window_left = ctx->saved_data["window_left"].toOptional<int64_t>();
    const auto window_right = ctx->saved_data["window_right"].toOptional<int64_t>();
    const auto grad_out = grad_outputs[0].contiguous();
    auto grads = empty_gradients(q, k, v);
    const int64_t per_group = grads.per_group;
    for (int64_t g = 0; g < grads.groups; ++g) {
      auto [dq, dk, dv] = at::_flash_attention_backward(
          group_heads(grad_out, g, per_group), group_heads(q, g, per_group), group_heads(k, g, 1),
          group_heads(v, g, 1), group_heads(out, g, per_group), logsumexp.get(g), cu_seqlens, cu_seqlens, max_seqlen,
          max_seqlen, 0.0, /*is_causal=*/true, rng_state.get(g), unused.get(g), scale, window_left, window_right);
      group_heads(grads.q, g, per_group).copy_(dq);
      group_heads(grads.k, g, 1).copy_(dk);
      group_heads(grads.v, g, 1).copy_(dv);
    }
    return {grads.q, grads.k, grads.v, at::Tensor()};
  }
};

// One KV head's slice of (N, heads, D) in cuDNN's dense layout: (1, per_group, N, D), a view.
at::Tensor dense_group(const at::Tensor& t, int64_t group, int64_t per_group) {
  return group_heads(t, group, per_group).unsqueeze(0).transpose(1, 2);
}

// Note [Head-grouped cuDNN attention]: one sample of all N tokens, no window.
struct HeadGroupedCudnn : public torch::autograd::Function<HeadGroupedCudnn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, double scale) {
    const int64_t groups = k.size(1);
    const int64_t per_group = q.size(1) / groups;
    auto out = at::empty_like(q);
    c10::List<at::Tensor> logsumexp, seed, offset;
    for (int64_t g = 0; g < groups; ++g) {
      auto [group_out, group_lse, cum_q, cum_k, max_q, max_k, group_seed, group_offset, debug] =
          at::_scaled_dot_product_cudnn_attention(dense_group(q, g, per_group), dense_group(k, g, 1),
                                                  dense_group(v, g, 1), /*attn_bias=*/std::nullopt,
                                                  /*compute_log_sumexp=*/true, 0.0, /*is_causal=*/true,
                                                  /*return_debug_mask=*/false, scale);  // (1, per_group, N, D)
      dense_group(out, g, per_group).copy_(group_out);
      logsumexp.push_back(group_lse);
      seed.push_back(group_seed);
      offset.push_back(group_offset);
    }
    ctx->save_for_backward({q, k, v, out});
    ctx->saved_data["logsumexp"] = logsumexp;
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3];
    const auto logsumexp = ctx->saved_data["logsumexp"].toTensorList();
    const auto seed = ctx->saved_data["seed"].toTensorList();
    const auto offset = ctx->saved_data["offset"].toTensorList();
    const double scale = ctx->saved_data["scale"].toDouble();
    // Contiguous like out, so each group's view has out's strides (cuDNN copies a grad_out whose strides differ).
    const auto grad_out = grad_outputs[0].contiguous();
    const int64_t tokens = q.size(0);
    auto grads = empty_gradients(q, k, v);
    const int64_t per_group = grads.per_group;
    for (int64_t g = 0; g < grads.groups; ++g) {
      auto [dq, dk, dv] = at::_scaled_dot_product_cudnn_attention_backward(
          dense_group(grad_out, g, per_group), dense_group(q, g, per_group), dense_group(k, g, 1),
          dense_group(v, g, 1), dense_group(out, g, per_group), logsumexp.get(g), seed.get(g), offset.get(g),
          /*attn_bias=*/at::Tensor(), /*cum_seq_q=*/at::Tensor(), /*cum_seq_k=*/at::Tensor(), tokens, tokens, 0.0,
          /*is_causal=*/true, scale);
      dense_group(grads.q, g, per_group).copy_(dq);
      dense_group(grads.k, g, 1).copy_(dk);  // (1, 1, N, D): the group's query heads summed
      dense_group(grads.v, g, 1).copy_(dv);
    }
    return {grads.q, grads.k, grads.v, at::Tensor()};
  }
};

}  // namespace

int64_t head_group_attention_scratch_bytes(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                           int64_t element_bytes) {
  const int64_t query_accumulator = tokens * heads * head_dim * 4;
  const int64_t expanded_key_value = kv_heads < heads ? 2 * tokens * heads * head_dim * element_bytes : 0;
  return query_accumulator + expanded_key_value;
}

const char* head_group_kernel_name(HeadGroupKernel kernel) {
  return kernel == HeadGroupKernel::kCudnn ? "cudnn" : "flash";
}

std::optional<HeadGroupKernel> head_group_kernel_named(const std::string& name) {
  for (const auto kernel : {HeadGroupKernel::kFlash, HeadGroupKernel::kCudnn}) {
    if (name == head_group_kernel_name(kernel)) return kernel;
  }
  return std::nullopt;
}

HeadGroupKernel head_group_kernel_for(HeadGroupKernel requested, const std::vector<int64_t>& sample_lengths,
                                      int64_t row_tokens, int64_t query_width, bool windowed) {
  const bool one_sample = sample_lengths.size() == 1 && sample_lengths[0] == row_tokens;
  const bool addressable = row_tokens * query_width < kCudnnMaxQueryElements;
  return requested == HeadGroupKernel::kCudnn && one_sample && !windowed && addressable ? HeadGroupKernel::kCudnn
                                                                                         : HeadGroupKernel::kFlash;
}

namespace {

// Why args cannot run on the cuDNN kernel ("" when they can): one sample of all `tokens`, no window,
// fewer than kCudnnMaxQueryElements query elements.
std::string cudnn_refusal(const HeadGroupArgs& args, int64_t tokens, int64_t query_elements) {
  if (!args.cu_seqlens.defined() || args.cu_seqlens.numel() != 2) {
    return std::to_string(args.cu_seqlens.defined() ? args.cu_seqlens.numel() - 1 : 0) + " samples";
  }
  if (args.max_seqlen != tokens) {
    return "max_seqlen " + std::to_string(args.max_seqlen) + " for " + std::to_string(tokens) + " tokens";
  }
  if (args.window_left || args.window_right) return "a sliding window";
  if (query_elements >= kCudnnMaxQueryElements) return std::to_string(query_elements) + " query elements";
  return "";
}

}  // namespace

at::Tensor head_grouped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const HeadGroupArgs& args) {
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3 || k.size(1) == 0 || q.size(1) % k.size(1) != 0 ||
      v.size(1) != k.size(1)) {
    throw Error("head_grouped_attention: q (N, H, D) and k, v (N, KV, D) with H a multiple of KV, got q " +
                std::to_string(q.dim()) + "-d with " + std::to_string(q.dim() == 3 ? q.size(1) : -1) + " heads, k " +
                std::to_string(k.dim() == 3 ? k.size(1) : -1) + " heads, v " +
                std::to_string(v.dim() == 3 ? v.size(1) : -1) + " heads");
  }
  if (args.kernel == HeadGroupKernel::kFlash) return HeadGroupedFlash::apply(q, k, v, args);
  if (const auto refusal = cudnn_refusal(args, q.size(0), q.numel()); !refusal.empty()) {
    throw Error("head_grouped_attention: the cuDNN kernel takes one sample of all the row's tokens, no window and "
                "fewer than " + std::to_string(kCudnnMaxQueryElements) +
                " query elements (Note [Head-grouped cuDNN attention]), got " + refusal);
  }
  return HeadGroupedCudnn::apply(q, k, v, args.scale);
}

}  // namespace finetune
