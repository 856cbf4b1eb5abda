// Head-grouped attention (model/head_group_attention.cpp). Flash (Note [Head-grouped flash
// attention]) against one at::_flash_attention_forward call over every head, with autograd's
// backward of that call: padding-free rows of several samples (one of a single token), grouped
// query heads (32 onto 8, as Llama-3-8B, and 8 onto 2 at head dim 64), multi-head attention (4 onto
// 4), and a sliding window; bf16 and fp16. cuDNN (Note [Head-grouped cuDNN attention]) on rows of
// one sample, against one at::_scaled_dot_product_cudnn_attention call and against the flash groups
// (the comment above each of those tests gives its bound).
//
// Each head runs the same kernel on the same values either way, so the output and the key and
// value gradients are equal bit for bit (the grouped-query sum over a KV head's query heads is the
// same sum). The query gradient is accumulated in fp32 with atomic adds over key blocks, whose
// order is not fixed within one call either, so a few elements may round differently (where the
// terms cancel, by more than an ulp of the small result): the grouped query gradient must be no
// further from an fp32 reference (eager attention per sample in fp32 on the same inputs) than the
// single call's, over every case of a dtype, to 0.1% of that error.
#include <gtest/gtest.h>

#include <array>
#include <iostream>
#include <utility>

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

// How attend() computes: the head-grouped function, one flash call, or one cuDNN call.
enum class Attention { kGrouped, kOneFlashCall, kOneCudnnCall };

// One at::_scaled_dot_product_cudnn_attention over every head of q (N, H, D), k, v (N, KV, D): the
// (1, heads, N, D) views the grouped kernel takes per group, all heads at once -> (N, H, D).
at::Tensor one_cudnn_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  auto dense = [](const at::Tensor& t) { return t.unsqueeze(0).transpose(1, 2); };
  const auto out = std::get<0>(at::_scaled_dot_product_cudnn_attention(dense(q), dense(k), dense(v), std::nullopt,
                                                                       /*compute_log_sumexp=*/true, 0.0, true, false,
                                                                       scale));  // (1, H, N, D)
  return out.transpose(1, 2).squeeze(0);
}

// q, k, v leaves; out and the three gradients (autograd's backward of the single calls).
Grads attend(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& grad_out,
             const HeadGroupArgs& args, Attention how) {
  auto q = q0.detach().requires_grad_(true), k = k0.detach().requires_grad_(true), v = v0.detach().requires_grad_(true);
  at::Tensor out;
  if (how == Attention::kGrouped) {
    out = head_grouped_attention(q, k, v, args);
  } else if (how == Attention::kOneFlashCall) {
    out = std::get<0>(at::_flash_attention_forward(q, k, v, args.cu_seqlens, args.cu_seqlens, args.max_seqlen,
                                                   args.max_seqlen, 0.0, true, false, args.scale, args.window_left,
                                                   args.window_right));
  } else {
    out = one_cudnn_call(q, k, v, args.scale);
  }
  out.backward(grad_out);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// fp32 eager attention, sample by sample (causal, the case's window): out and the three gradients.
Grads reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& grad_out,
                          const GroupCase& c, double scale) {
  std::vector<at::Tensor> outs, dq, dk, dv;
  int64_t start = 0;
  auto rows = [](const at::Tensor& t) { return t.squeeze(0).transpose(0, 1); };  // (1, heads, n, D) -> (n, heads, D)
  for (const auto n : c.sample_lengths) {
    auto leaf = [&](const at::Tensor& t) {  // (1, heads, n, D) fp32
      return t.narrow(0, start, n).to(at::kFloat).transpose(0, 1).unsqueeze(0).detach().requires_grad_(true);
    };
    auto qs = leaf(q), ks = leaf(k), vs = leaf(v);
    AttentionSpec spec;
    spec.scale = scale;
    if (c.window_left) spec.window = *c.window_left + 1;
    const auto allowed = spec.window ? sliding_window_keys(at::Tensor(), *spec.window, n, 0, q.device())
                                     : causal_keys(n, 0, q.device());
    const auto out = eager_attention(qs, ks, vs, allowed, spec);
    out.backward(grad_out.narrow(0, start, n).to(at::kFloat).transpose(0, 1).unsqueeze(0));
    outs.push_back(rows(out.detach()));
    dq.push_back(rows(qs.grad()));
    dk.push_back(rows(ks.grad()));
    dv.push_back(rows(vs.grad()));
    start += n;
  }
  return {at::cat(outs, 0), at::cat(dq, 0), at::cat(dk, 0), at::cat(dv, 0)};
}

// Random bf16/fp16 q, k, v and an output gradient for a case, on the GPU.
struct Inputs {
  at::Tensor q, k, v, grad_out;
};
Inputs random_inputs(const GroupCase& c, at::ScalarType dtype) {
  int64_t tokens = 0;
  for (const auto n : c.sample_lengths) tokens += n;
  const auto options = at::TensorOptions().dtype(dtype).device(at::Device(at::kCUDA, 0));
  return {at::randn({tokens, c.heads, c.head_dim}, options), at::randn({tokens, c.kv_heads, c.head_dim}, options),
          at::randn({tokens, c.kv_heads, c.head_dim}, options), at::randn({tokens, c.heads, c.head_dim}, options)};
}

std::string case_name(const GroupCase& c, at::ScalarType dtype) {
  int64_t tokens = 0;
  for (const auto n : c.sample_lengths) tokens += n;
  return std::string(c10::toString(dtype)) + " " + std::to_string(tokens) + " tokens, heads " +
         std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " d " + std::to_string(c.head_dim) +
         (c.window_left ? " window" : "");
}

TEST(HeadGroupAttention, EqualsOneFlashCallForwardAndBackward) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(5);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    ErrorTally query_gradient_tally;
    for (const auto& c : kCases) {
      SCOPED_TRACE(case_name(c, dtype));
      int64_t longest = 0;
      for (const auto n : c.sample_lengths) longest = std::max(longest, n);
      const auto [q, k, v, grad_out] = random_inputs(c, dtype);
      const HeadGroupArgs args{cumulative_lengths(c.sample_lengths, cuda), longest,
                               1.0 / std::sqrt(static_cast<double>(c.head_dim)), c.window_left,
                               c.window_left ? std::optional<int64_t>(0) : std::nullopt};
      const auto one = attend(q, k, v, grad_out, args, Attention::kOneFlashCall);
      const auto grouped = attend(q, k, v, grad_out, args, Attention::kGrouped);
      EXPECT_TRUE(equal_values(grouped.out, one.out));
      EXPECT_TRUE(equal_values(grouped.dk, one.dk));
      EXPECT_TRUE(equal_values(grouped.dv, one.dv));
      query_gradient_tally.add(grouped.dq, one.dq, reference_attention(q, k, v, grad_out, c, args.scale).dq);
      std::cout << "query gradient elements differing from the single call: "
                << cuda_testing::count_differing(grouped.dq, one.dq) << " of " << one.dq.numel() << "\n";
    }
    EXPECT_TRUE(query_gradient_tally.fused_no_worse(1.001));
  }
}

// Rows of one sample (cuDNN's dense op takes no cu_seqlens): 1000 tokens and 4097 (not a multiple of
// 64 or 128, where older cuDNN releases computed wrong results), Llama-3-8B's heads and 8 onto 2 at
// head dim 64.
const std::vector<GroupCase> kOneSampleCases = {
    {{1000}, 32, 8, 128, std::nullopt},
    {{4097}, 32, 8, 128, std::nullopt},
    {{1000}, 8, 2, 64, std::nullopt},
    {{4097}, 8, 2, 64, std::nullopt},
};

HeadGroupArgs one_sample_args(const GroupCase& c, HeadGroupKernel kernel) {
  const int64_t tokens = c.sample_lengths.at(0);
  return {cumulative_lengths(c.sample_lengths, at::Device(at::kCUDA, 0)), tokens,
          1.0 / std::sqrt(static_cast<double>(c.head_dim)), std::nullopt, std::nullopt, kernel};
}

// Out, dq, dk, dv of `fused` and `aten`, each tallied against the fp32 reference.
struct GradTallies {
  ErrorTally out, dq, dk, dv;
  void add(const Grads& fused, const Grads& aten, const Grads& reference) {
    out.add(fused.out, aten.out, reference.out);
    dq.add(fused.dq, aten.dq, reference.dq);
    dk.add(fused.dk, aten.dk, reference.dk);
    dv.add(fused.dv, aten.dv, reference.dv);
  }
  void expect_no_worse(double ratio) const {
    const std::array<std::pair<const char*, const ErrorTally*>, 4> named = {
        {{"out", &out}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}}};
    for (const auto& [name, tally] : named) {
      const auto result = tally->fused_no_worse(ratio);
      std::cout << name << ": " << result.message() << "\n";
      EXPECT_TRUE(result) << name;
    }
  }
};

// Over kOneSampleCases in `dtype`: compare(case, inputs, the cuDNN kernel's args) gives a pair of
// results (the one under test, the one it is held to), each tallied against the fp32 reference.
template <typename Compare>
GradTallies tally_one_sample_cases(at::ScalarType dtype, const Compare& compare) {
  GradTallies tallies;
  for (const auto& c : kOneSampleCases) {
    SCOPED_TRACE(case_name(c, dtype));
    const auto inputs = random_inputs(c, dtype);
    const auto args = one_sample_args(c, HeadGroupKernel::kCudnn);
    const auto [tested, against] = compare(c, inputs, args);
    tallies.add(tested, against, reference_attention(inputs.q, inputs.k, inputs.v, inputs.grad_out, c, args.scale));
  }
  return tallies;
}

// The cuDNN groups against one cuDNN call over every head (at::_scaled_dot_product_cudnn_attention
// with the KV heads as they are, autograd's backward of it). Each group is the single call's
// arithmetic for its heads only if cuDNN runs the same engine for H / KV query heads as for H, which
// its heuristics do not promise, and the query gradient is accumulated with atomic adds either way:
// so each of out, dq, dk, dv must be no further from fp32 eager attention (per sample, in fp32 on
// the same inputs) than the single call's, over every case of a dtype, to 1%. Both calls accumulate
// in fp32 and feed the GEMMs half-precision operands, so their errors are those roundings'; another
// engine or summation order moves the relative L2 error over the 6M-24M elements of a tensor per
// dtype by its statistical spread (~1/sqrt(n), under 0.1%), while a query head paired with the wrong
// KV head, or a gradient left unsummed, is off by O(1). The elements that differ from the single
// call are printed (none where the engines agree).
TEST(HeadGroupAttention, CudnnGroupsMatchOneCudnnCallForwardAndBackward) {
  at::manual_seed(7);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    const auto tallies = tally_one_sample_cases(dtype, [&](const GroupCase& c, const Inputs& in, const HeadGroupArgs& args) {
      const auto one = attend(in.q, in.k, in.v, in.grad_out, args, Attention::kOneCudnnCall);
      const auto grouped = attend(in.q, in.k, in.v, in.grad_out, args, Attention::kGrouped);
      std::cout << case_name(c, dtype) << ": elements differing from the single cuDNN call: out "
                << cuda_testing::count_differing(grouped.out, one.out) << ", dq "
                << cuda_testing::count_differing(grouped.dq, one.dq) << ", dk "
                << cuda_testing::count_differing(grouped.dk, one.dk) << ", dv "
                << cuda_testing::count_differing(grouped.dv, one.dv) << " (of " << one.out.numel() << ", "
                << one.dq.numel() << ", " << one.dk.numel() << ", " << one.dv.numel() << ")\n";
      return std::make_pair(grouped, one);
    });
    SCOPED_TRACE(c10::toString(dtype));
    tallies.expect_no_worse(1.01);
  }
}

// The cuDNN groups against the flash groups (themselves checked against one flash call above), both
// against fp32 eager attention: cuDNN's error no more than 25% above flash's, for each of out, dq,
// dk, dv over every case of a dtype. Two different kernels: both accumulate in fp32 from
// half-precision GEMM operands, but their blocking, exponentials and the order of the atomic
// query-gradient sums differ, so their errors are of one size without being equal; the 25% allows
// for that, while a wrong pairing of heads, a missing scale or an unsummed gradient errs by O(1),
// hundreds of times flash's error. The two errors are printed.
TEST(HeadGroupAttention, CudnnGroupsAsCloseToFp32AsFlashGroups) {
  at::manual_seed(11);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    const auto tallies = tally_one_sample_cases(dtype, [](const GroupCase&, const Inputs& in, const HeadGroupArgs& args) {
      auto flash_args = args;
      flash_args.kernel = HeadGroupKernel::kFlash;
      return std::make_pair(attend(in.q, in.k, in.v, in.grad_out, args, Attention::kGrouped),
                            attend(in.q, in.k, in.v, in.grad_out, flash_args, Attention::kGrouped));
    });
    SCOPED_TRACE(c10::toString(dtype));
    tallies.expect_no_worse(1.25);
  }
}

TEST(HeadGroupAttention, RefusesHeadsThatAreNotAMultipleOfTheKvHeads) {
  const auto options = at::TensorOptions().dtype(at::kBFloat16).device(at::Device(at::kCUDA, 0));
  const auto q = at::zeros({4, 6, 64}, options), kv = at::zeros({4, 4, 64}, options);
  const HeadGroupArgs args{cumulative_lengths({4}, at::Device(at::kCUDA, 0)), 4, 0.125, std::nullopt, std::nullopt};
  EXPECT_THROW(head_grouped_attention(q, kv, kv, args), Error);
}

}  // namespace
}  // namespace finetune
