// Head-grouped flash attention (model/head_group_attention.cpp; Note [Head-grouped flash
// attention]) against one at::_flash_attention_forward call over every head, with autograd's
// backward of that call: padding-free rows of several samples (one of a single token), grouped
// query heads (32 onto 8, as Llama-3-8B, and 8 onto 2 at head dim 64), multi-head attention (4 onto
// 4), and a sliding window; bf16 and fp16.
//
// Each head runs the same kernel on the same values either way, so the output and the key and
// value gradients are equal bit for bit (the grouped-query sum over a KV head's query heads is the
// same sum). The query gradient is accumulated in fp32 with atomic adds over key blocks, whose
// order is not fixed within one call either: two orders of an fp32 sum differ far below the
// dtype's spacing, so after rounding an element may land one unit in the last place of the dtype
// apart, never more.
#include <gtest/gtest.h>

#include "finetune/model/head_group_attention.h"
#include "finetune/util/errors.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::equal_values;
using cuda_testing::within_bound;

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

TEST(HeadGroupAttention, EqualsOneFlashCallForwardAndBackward) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(5);
  for (const auto dtype : cuda_testing::half_dtypes()) {
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
      const auto magnitude = at::maximum(cuda_testing::host_double(grouped.dq).abs(),
                                         cuda_testing::host_double(one.dq).abs());
      EXPECT_TRUE(within_bound(grouped.dq, one.dq, cuda_testing::ulp_at(magnitude, dtype)));
    }
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
