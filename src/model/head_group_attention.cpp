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

struct HeadGroupedFlash : public torch::autograd::Function<HeadGroupedFlash> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const FlashVarlenArgs& args) {
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
    const int64_t groups = k.size(1);
    const int64_t per_group = q.size(1) / groups;
    auto grad_q = at::empty_like(q);
    auto grad_k = at::empty_like(k);
    auto grad_v = at::empty_like(v);
    for (int64_t g = 0; g < groups; ++g) {
      auto [dq, dk, dv] = at::_flash_attention_backward(
          group_heads(grad_out, g, per_group), group_heads(q, g, per_group), group_heads(k, g, 1),
          group_heads(v, g, 1), group_heads(out, g, per_group), logsumexp.get(g), cu_seqlens, cu_seqlens, max_seqlen,
          max_seqlen, 0.0, /*is_causal=*/true, rng_state.get(g), unused.get(g), scale, window_left, window_right);
      group_heads(grad_q, g, per_group).copy_(dq);
      group_heads(grad_k, g, 1).copy_(dk);
      group_heads(grad_v, g, 1).copy_(dv);
    }
    return {grad_q, grad_k, grad_v, at::Tensor()};
  }
};

}  // namespace

int64_t head_group_attention_scratch_bytes(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                           int64_t element_bytes) {
  const int64_t query_accumulator = tokens * heads * head_dim * 4;
  const int64_t expanded_key_value = kv_heads < heads ? 2 * tokens * heads * head_dim * element_bytes : 0;
  return query_accumulator + expanded_key_value;
}

at::Tensor head_grouped_flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const FlashVarlenArgs& args) {
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3 || k.size(1) == 0 || q.size(1) % k.size(1) != 0 ||
      v.size(1) != k.size(1)) {
    throw Error("head_grouped_flash_attention: q (N, H, D) and k, v (N, KV, D) with H a multiple of KV, got q " +
                std::to_string(q.dim()) + "-d with " + std::to_string(q.dim() == 3 ? q.size(1) : -1) + " heads, k " +
                std::to_string(k.dim() == 3 ? k.size(1) : -1) + " heads, v " +
                std::to_string(v.dim() == 3 ? v.size(1) : -1) + " heads");
  }
  return HeadGroupedFlash::apply(q, k, v, args);
}

}  // namespace finetune
