// Head-grouped flash attention (model/head_group_attention.cpp; Note [Head-grouped flash
// attention]) against one at::_flash_attention_forward call over every head, with autograd's
// backward of that call: padding-free rows of several samples (one of a single token), grouped
// query heads (32 onto 8, as Llama-3-8B, and 8 onto 2 at head dim 64), multi-head attention (4 onto
// 4), and a sliding window; bf16 and fp16.
//
// Each head runs the same kernel on the same values either way, so the output and the key and
// value gradients are equal bit for bit (the grouped-query sum over a KV head's query heads is the
// same sum). The query gradient is accumulated in fp32 with atomic adds over key blocks, whose
// order is not fixed within one call either, so a few elements may round differently (where the
// terms cancel, by more than an ulp of the small result): the grouped query gradient must be no
// further from an fp32 reference (eager attention per sample in fp32 on the same inputs) than the
// single call's, over every case of a dtype, to 0.1% of that error.
#include <gtest/gtest.h>

#include <iostream>

#include "finetune/model/attention_kernels.h"
#include "finetune/model/head_group_attention.h"
#include "finetune/util/errors.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::equal_values;
using cuda_testing::ErrorTally;

struct GroupCase {
  std::vector<int64_t> sample_lengths;
  int64_t heads, kv_heads, head_dim;
  std::optional<int64_t> window_left;
};

const std::vector<GroupCase> kCases = {
    {{300, 1, 517, 128}, 32, 8, 128, std::nullopt},  // Llama-3-8B's heads
    {{1000}, 8, 2, 64, std::nullopt},
    {{200, 333}, 4, 4, 128, std::nullopt},           // no grouping of query heads: 4 groups of one
    {{700, 90}, 32, 8, 128, 63},                     // sliding window of 64
};

at::Tensor cumulative_lengths(const std::vector<int64_t>& lengths, const at::Device& device) {
  std::vector<int32_t> cu{0};
  for (const auto n : lengths) cu.push_back(cu.back() + static_cast<int32_t>(n));
  return at::tensor(cu, at::TensorOptions().dtype(at::kInt)).to(device);
}

struct Grads {
  at::Tensor out, dq, dk, dv;
};

// q, k, v leaves; `grouped` picks the head-grouped function or one flash call.
Grads attend(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& grad_out,
             const FlashVarlenArgs& args, bool grouped) {
  auto q = q0.detach().requires_grad_(true), k = k0.detach().requires_grad_(true), v = v0.detach().requires_grad_(true);
  const auto out = grouped ? head_grouped_flash_attention(q, k, v, args)
                           : std::get<0>(at::_flash_attention_forward(
                                 q, k, v, args.cu_seqlens, args.cu_seqlens, args.max_seqlen, args.max_seqlen, 0.0,
                                 true, false, args.scale, args.window_left, args.window_right));
  out.backward(grad_out);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// The query gradient of fp32 eager attention, sample by sample (causal, the case's window).
at::Tensor reference_query_gradient(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& grad_out, const GroupCase& c, double scale) {
  std::vector<at::Tensor> grads;
  int64_t start = 0;
  for (const auto n : c.sample_lengths) {
    auto per_head = [&](const at::Tensor& t) { return t.narrow(0, start, n).to(at::kFloat).transpose(0, 1).unsqueeze(0); };
    auto qs = per_head(q).detach().requires_grad_(true);  // (1, H, n, D)
    AttentionSpec spec;
    spec.scale = scale;
    if (c.window_left) spec.window = *c.window_left + 1;
    const auto allowed = spec.window ? sliding_window_keys(at::Tensor(), *spec.window, n, 0, q.device())
                                     : causal_keys(n, 0, q.device());
    eager_attention(qs, per_head(k), per_head(v), allowed, spec).backward(per_head(grad_out));
    grads.push_back(qs.grad().squeeze(0).transpose(0, 1));  // (n, H, D)
    start += n;
  }
  return at::cat(grads, 0);
}

TEST(HeadGroupAttention, EqualsOneFlashCallForwardAndBackward) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(5);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    ErrorTally query_gradient_tally;
    for (const auto& c : kCases) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " heads " + std::to_string(c.heads) + "/" +
                   std::to_string(c.kv_heads) + " d " + std::to_string(c.head_dim) +
                   (c.window_left ? " window" : ""));
      int64_t tokens = 0, longest = 0;
      for (const auto n : c.sample_lengths) tokens += n, longest = std::max(longest, n);
      const auto options = at::TensorOptions().dtype(dtype).device(cuda);
      const auto q = at::randn({tokens, c.heads, c.head_dim}, options);
      const auto k = at::randn({tokens, c.kv_heads, c.head_dim}, options);
      const auto v = at::randn({tokens, c.kv_heads, c.head_dim}, options);
      const auto grad_out = at::randn({tokens, c.heads, c.head_dim}, options);
      const FlashVarlenArgs args{cumulative_lengths(c.sample_lengths, cuda), longest,
                                 1.0 / std::sqrt(static_cast<double>(c.head_dim)), c.window_left,
                                 c.window_left ? std::optional<int64_t>(0) : std::nullopt};
      const auto one = attend(q, k, v, grad_out, args, /*grouped=*/false);
      const auto grouped = attend(q, k, v, grad_out, args, /*grouped=*/true);
      EXPECT_TRUE(equal_values(grouped.out, one.out));
      EXPECT_TRUE(equal_values(grouped.dk, one.dk));
      EXPECT_TRUE(equal_values(grouped.dv, one.dv));
      query_gradient_tally.add(grouped.dq, one.dq, reference_query_gradient(q, k, v, grad_out, c, args.scale));
      std::cout << "query gradient elements differing from the single call: "
                << cuda_testing::count_differing(grouped.dq, one.dq) << " of " << one.dq.numel() << "\n";
    }
    EXPECT_TRUE(query_gradient_tally.fused_no_worse(1.001));
  }
}

TEST(HeadGroupAttention, RefusesHeadsThatAreNotAMultipleOfTheKvHeads) {
  const auto options = at::TensorOptions().dtype(at::kBFloat16).device(at::Device(at::kCUDA, 0));
  const auto q = at::zeros({4, 6, 64}, options), kv = at::zeros({4, 4, 64}, options);
  const FlashVarlenArgs args{cumulative_lengths({4}, at::Device(at::kCUDA, 0)), 4, 0.125, std::nullopt, std::nullopt};
  EXPECT_THROW(head_grouped_flash_attention(q, kv, kv, args), Error);
}

}  // namespace
}  // namespace finetune
