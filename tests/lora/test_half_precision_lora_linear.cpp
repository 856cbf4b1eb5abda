// The half-precision LoRA linear against PEFT's expression evaluated in float64 on the same
// bf16 values: the output and all three gradients within bf16 rounding, and no less accurate
// than PEFT's own expression run on the bf16 model.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "finetune/lora/half_precision_lora_linear.h"
#include "finetune/lora/lora_kernels.h"
#include "finetune/util/errors.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/model/linear.h"

namespace finetune {
namespace {

double relative_error(const at::Tensor& value, const at::Tensor& reference) {
  auto ref = reference.to(at::kDouble);
  return (value.to(at::kDouble) - ref).norm().item<double>() / ref.norm().item<double>();
}

struct Case {
  at::Tensor x, weight, bias, lora_A, lora_B, grad_out;
  double scaling = 2.0;
};

Case make_case(bool with_bias) {
  at::manual_seed(7);
  Case c;
  const int64_t in = 96, out = 80, r = 8;
  c.x = at::randn({3, 17, in}).to(at::kBFloat16);
  c.weight = (at::randn({out, in}) / 10).to(at::kBFloat16);
  if (with_bias) c.bias = at::randn({out}).to(at::kBFloat16);
  c.lora_A = at::randn({r, in}) / 10;  // fp32 adapters, B non-zero so the branch matters
  c.lora_B = at::randn({out, r}) / 10;
  c.grad_out = at::randn({3, 17, out}).to(at::kBFloat16);
  return c;
}

// The case's base weight and bias as a dense projection.
Linear base_of(const Case& c) {
  Linear base;
  base.weight = c.weight;
  base.bias = c.bias;
  base.compute_dtype = c.weight.scalar_type();
  return base;
}

struct Result {
  at::Tensor y, dx, d_lora_A, d_lora_B;
};

// PEFT's expression: base(x) + lora_B(lora_A(x.to(A.dtype))) * scaling, cast back to x's dtype,
// on the given dtypes, or entirely in `compute_dtype` when it is set.
Result peft_expression(const Case& c, std::optional<at::ScalarType> compute_dtype) {
  auto cast = [&](const at::Tensor& t) { return compute_dtype ? t.to(*compute_dtype) : t; };
  auto x = cast(c.x).detach().requires_grad_(true);
  auto lora_A = cast(c.lora_A).detach().requires_grad_(true);
  auto lora_B = cast(c.lora_B).detach().requires_grad_(true);
  auto base = at::linear(x, cast(c.weight), c.bias.defined() ? cast(c.bias) : at::Tensor());
  auto delta = at::linear(at::linear(x.to(lora_A.scalar_type()), lora_A), lora_B) * c.scaling;
  auto y = (base + delta).to(base.scalar_type());
  y.backward(cast(c.grad_out));
  return {y.detach(), x.grad(), lora_A.grad(), lora_B.grad()};
}

Result half_precision(const Case& c, bool cache_operands = true) {
  auto x = c.x.detach().requires_grad_(true);
  LoraAdapter adapter;
  adapter.lora_A = c.lora_A.detach().requires_grad_(true);
  adapter.lora_B = c.lora_B.detach().requires_grad_(true);
  adapter.scaling = c.scaling;
  adapter.cache_operands = cache_operands;
  const auto base = base_of(c);
  auto y = half_precision_lora_linear(x, base, adapter);
  y.backward(c.grad_out);
  return {y.detach(), x.grad(), adapter.lora_A.grad(), adapter.lora_B.grad()};
}

void expect_as_accurate_as_peft(bool with_bias) {
  const auto c = make_case(with_bias);
  const auto exact = peft_expression(c, at::kDouble);
  const auto peft_bf16 = peft_expression(c, std::nullopt);
  const auto ours = half_precision(c);

  EXPECT_EQ(ours.y.scalar_type(), at::kBFloat16);
  EXPECT_EQ(ours.y.sizes(), c.grad_out.sizes());
  EXPECT_EQ(ours.dx.scalar_type(), at::kBFloat16);
  EXPECT_EQ(ours.d_lora_A.scalar_type(), at::kFloat);  // adapter gradients stay fp32
  EXPECT_EQ(ours.d_lora_B.scalar_type(), at::kFloat);
  const std::pair<const char*, std::pair<at::Tensor, std::pair<at::Tensor, at::Tensor>>> checks[] = {
      {"y", {exact.y, {ours.y, peft_bf16.y}}},
      {"dx", {exact.dx, {ours.dx, peft_bf16.dx}}},
      {"d_lora_A", {exact.d_lora_A, {ours.d_lora_A, peft_bf16.d_lora_A}}},
      {"d_lora_B", {exact.d_lora_B, {ours.d_lora_B, peft_bf16.d_lora_B}}},
  };
  for (const auto& [name, tensors] : checks) {
    const double ours_error = relative_error(tensors.second.first, tensors.first);
    const double peft_error = relative_error(tensors.second.second, tensors.first);
    std::printf("%-9s ours %.3g  PEFT-bf16 %.3g\n", name, ours_error, peft_error);
    const bool adapter_gradient = std::string(name).rfind("d_lora", 0) == 0;
    if (adapter_gradient) {
      // fp32 in PEFT; here within about 2^-17 (Note [Split fp32 operands]), a thousandth of bf16's
      // unit roundoff. A plain bf16 product would be near 2e-3.
      EXPECT_LT(ours_error, 1e-5) << name;
    } else {
      // bf16 outputs: one rounding of the sum, as PEFT, plus bf16 rounding of the update's factors
      // (this case's update is as large as the base output, the worst case; bf16's unit roundoff
      // is 2^-8 = 3.9e-3).
      EXPECT_LT(ours_error, 1.25 * peft_error) << name << ": ours " << ours_error << ", PEFT " << peft_error;
    }
  }
}

TEST(HalfPrecisionLoraLinear, MatchesPeftWithinBf16RoundingWithoutBias) { expect_as_accurate_as_peft(false); }

TEST(HalfPrecisionLoraLinear, MatchesPeftWithinBf16RoundingWithBias) { expect_as_accurate_as_peft(true); }

TEST(HalfPrecisionLoraLinear, AppliesUnderThePolicyToHalfPrecisionInputsWithoutDropout) {
  LoraAdapter adapter;
  adapter.kernels.half_precision_lora = true;
  const auto bf16 = at::zeros({2, 4}, at::kBFloat16);
  EXPECT_TRUE(adapter.uses_half_precision_path(bf16, /*training=*/true));
  EXPECT_TRUE(adapter.uses_half_precision_path(at::zeros({2, 4}, at::kHalf), true));
  EXPECT_FALSE(adapter.uses_half_precision_path(at::zeros({2, 4}), true));  // fp32: PEFT's exact expression
  adapter.dropout = 0.1;
  EXPECT_FALSE(adapter.uses_half_precision_path(bf16, /*training=*/true));  // dropout needs x's mask
  EXPECT_TRUE(adapter.uses_half_precision_path(bf16, /*training=*/false));
  adapter.kernels.half_precision_lora = false;  // the CPU's policy: PEFT's expression in any dtype
  EXPECT_FALSE(adapter.uses_half_precision_path(bf16, /*training=*/false));
}

TEST(HalfPrecisionLoraLinear, CpuPolicyKeepsPeftsExpression) {
  ModelConfig config;
  config.head_dim = 64;
  const auto cpu = choose_kernel_policy(at::kCPU, at::kBFloat16, config);
  EXPECT_FALSE(cpu.half_precision_lora);
  EXPECT_FALSE(cpu.fused_elementwise);
  EXPECT_FALSE(cpu.fused_rms_norm);
  EXPECT_FALSE(cpu.variable_length_attention);
  EXPECT_FALSE(cpu.fused_adamw);
  EXPECT_FALSE(cpu.half_gemm_fp32_output);
  EXPECT_FALSE(cpu.padding_free_batches);
  EXPECT_FALSE(cpu.cuda_graphs);
  const auto cuda = choose_kernel_policy(at::Device(at::kCUDA, 0), at::kBFloat16, config);
  EXPECT_TRUE(cuda.half_precision_lora);
  EXPECT_TRUE(cuda.half_gemm_fp32_output);
  EXPECT_TRUE(cuda.variable_length_attention);
  EXPECT_TRUE(cuda.padding_free_batches);
  EXPECT_TRUE(cuda.cuda_graphs);
  EXPECT_TRUE(cuda.fused_adamw);
  EXPECT_EQ(cuda.fused_elementwise, cuda_kernels_compiled_in());
  const auto cuda_fp32 = choose_kernel_policy(at::Device(at::kCUDA, 0), at::kFloat, config);
  EXPECT_FALSE(cuda_fp32.half_precision_lora);
  EXPECT_FALSE(cuda_fp32.variable_length_attention);
  EXPECT_FALSE(cuda_fp32.padding_free_batches);
  EXPECT_FALSE(cuda_fp32.cuda_graphs);
  config.head_dim = 12;  // flash attention needs a multiple of 8
  EXPECT_FALSE(choose_kernel_policy(at::Device(at::kCUDA, 0), at::kBFloat16, config).variable_length_attention);
}

// The SwiGLU-fed node (Note [SwiGLU into the down projection]) runs the fused SwiGLU kernels, which
// are CUDA's: on the CPU, even under the one-node path, the adapter leaves the product to the
// caller (an undefined result), as it does without the fused policy. tests/cuda covers the GPU.
TEST(HalfPrecisionLoraLinear, SwigluFedNodeOnlyWhereTheFusedKernelsRun) {
  const auto c = make_case(false);
  LoraAdapter adapter;
  adapter.lora_A = c.lora_A;
  adapter.lora_B = c.lora_B;
  adapter.kernels.half_precision_lora = true;
  const auto base = base_of(c);
  const auto gate = at::randn({3, c.weight.size(1)}).to(at::kBFloat16), up = at::randn_like(gate);
  EXPECT_FALSE(adapter.forward_swiglu(base, gate, up, /*training=*/true).defined());  // policy: not fused
  adapter.kernels.fused_elementwise = true;
  EXPECT_FALSE(adapter.forward_swiglu(base, gate, up, /*training=*/true).defined());  // CPU tensors
}

TEST(HalfPrecisionLoraLinear, LinearForwardRoutesBf16AdaptersThroughIt) {
  const auto c = make_case(false);
  Linear layer;
  layer.weight = c.weight;
  auto lora = std::make_unique<LoraAdapter>();
  lora->lora_A = c.lora_A;
  lora->lora_B = c.lora_B;
  lora->scaling = c.scaling;
  lora->kernels.half_precision_lora = true;
  const auto* adapter = lora.get();
  layer.adapter = std::move(lora);
  auto y = linear_forward(layer, c.x, /*training=*/true);
  EXPECT_TRUE(at::equal(y, half_precision_lora_linear(c.x, base_of(c), *adapter)));
}

TEST(HalfPrecisionLoraLinear, WeightOperandsAreCachedUntilTheAdapterChanges) {
  const auto c = make_case(false);
  LoraAdapter adapter;
  adapter.lora_A = c.lora_A.clone().requires_grad_(true);
  adapter.lora_B = c.lora_B.clone().requires_grad_(true);
  adapter.scaling = c.scaling;
  const auto first = half_precision_operands(adapter, at::kBFloat16);
  EXPECT_EQ(half_precision_operands(adapter, at::kBFloat16), first);  // unchanged: reused
  const auto base = base_of(c);
  const auto before = half_precision_lora_linear(c.x, base, adapter);
  {
    at::NoGradGuard no_grad;
    adapter.lora_B.mul_(3.0);  // an optimizer step updates in place and moves the version counter
  }
  const auto second = half_precision_operands(adapter, at::kBFloat16);
  EXPECT_NE(second, first);
  EXPECT_TRUE(at::equal(second->B_split.narrow(1, 0, 8), (c.lora_B * 3.0).to(at::kBFloat16)));
  LoraAdapter fresh;
  fresh.lora_A = adapter.lora_A.detach().clone();
  fresh.lora_B = adapter.lora_B.detach().clone();
  fresh.scaling = c.scaling;
  const auto after = half_precision_lora_linear(c.x, base, adapter);
  EXPECT_FALSE(at::equal(after, before));
  EXPECT_TRUE(at::equal(after, half_precision_lora_linear(c.x, base, fresh)));
  EXPECT_NE(half_precision_operands(adapter, at::kHalf), second);  // another dtype: rebuilt
}

// refresh_half_precision_operands re-splits every changed adapter in place (the addresses a CUDA
// graph captured stay valid), leaves unchanged ones alone, builds missing operands, and gives the
// values half_precision_operands gives one adapter at a time.
TEST(HalfPrecisionLoraLinear, RefreshingManyAdaptersEqualsRefreshingEachInPlace) {
  at::manual_seed(3);
  std::vector<std::unique_ptr<LoraAdapter>> adapters;
  for (const auto& [r, in, out] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4, 24, 40}, {8, 96, 80}, {3, 7, 5}}) {
    auto adapter = std::make_unique<LoraAdapter>();
    adapter->lora_A = (at::randn({r, in}) / 10).requires_grad_(true);
    adapter->lora_B = (at::randn({out, r}) / 10).requires_grad_(true);
    adapters.push_back(std::move(adapter));
  }
  std::vector<const LoraAdapter*> all;
  for (const auto& adapter : adapters) all.push_back(adapter.get());
  refresh_half_precision_operands(all, at::kBFloat16);  // builds every cache
  std::vector<const HalfPrecisionOperands*> built;
  std::vector<const void*> addresses;
  for (const auto* adapter : all) {
    ASSERT_TRUE(adapter->half_precision_operands);
    built.push_back(adapter->half_precision_operands.get());
    addresses.push_back(adapter->half_precision_operands->A_split.data_ptr());
  }
  {
    at::NoGradGuard no_grad;
    adapters[0]->lora_A.add_(0.25);  // changed
    adapters[2]->lora_B.mul_(-3.0);  // changed; adapters[1] unchanged
  }
  refresh_half_precision_operands(all, at::kBFloat16);
  EXPECT_EQ(adapters[1]->half_precision_operands.get(), built[1]) << "an unchanged adapter keeps its operands";
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& operands = *all[i]->half_precision_operands;
    EXPECT_EQ(operands.A_split.data_ptr(), addresses[i]) << i << ": refreshed in place";
    EXPECT_TRUE(at::equal(operands.A_split, split_hi_lo(all[i]->lora_A.detach(), at::kBFloat16, 0))) << i;
    EXPECT_TRUE(at::equal(operands.B_split, split_hi_lo(all[i]->lora_B.detach(), at::kBFloat16, 1))) << i;
    // Up to date: asking one adapter alone reuses what the refresh left.
    EXPECT_EQ(half_precision_operands(*all[i], at::kBFloat16).get(), all[i]->half_precision_operands.get()) << i;
  }
}

// Note [Operands split per use]: an adapter that keeps no operands splits lora_A and lora_B in its
// forward; the output and all three gradients are those of the cached operands, bit for bit, and
// neither half_precision_operands' cache nor a refresh leaves any operands on the adapter.
TEST(HalfPrecisionLoraLinear, OperandsSplitPerUseGiveTheCachedResultsBitForBit) {
  for (const bool with_bias : {false, true}) {
    const auto c = make_case(with_bias);
    const auto cached = half_precision(c, /*cache_operands=*/true);
    const auto per_use = half_precision(c, /*cache_operands=*/false);
    EXPECT_TRUE(at::equal(per_use.y, cached.y)) << with_bias;
    EXPECT_TRUE(at::equal(per_use.dx, cached.dx)) << with_bias;
    EXPECT_TRUE(at::equal(per_use.d_lora_A, cached.d_lora_A)) << with_bias;
    EXPECT_TRUE(at::equal(per_use.d_lora_B, cached.d_lora_B)) << with_bias;
  }
  const auto c = make_case(false);
  LoraAdapter adapter;
  adapter.lora_A = c.lora_A.detach().requires_grad_(true);
  adapter.lora_B = c.lora_B.detach().requires_grad_(true);
  adapter.kernels.half_precision_lora = true;
  adapter.cache_operands = false;
  const auto base = base_of(c);
  half_precision_lora_linear(c.x, base, adapter).sum().backward();
  refresh_derived_tensors({&adapter}, at::kBFloat16);
  adapter.refresh_derived_tensors(at::kBFloat16);
  EXPECT_FALSE(adapter.half_precision_operands) << "nothing kept between forwards";
}

TEST(HalfPrecisionLoraLinear, SplitIntoRefusesMismatchedOutputs) {
  const auto t = at::randn({3, 5});
  EXPECT_THROW(split_hi_lo_into({{t, at::empty({3, 5}, at::kBFloat16), 0}}, false), Error);
  EXPECT_THROW(split_hi_lo_into({{t, at::empty({6, 5}, at::kBFloat16), 1}}, false), Error);
  EXPECT_THROW(split_hi_lo_into({{t.t(), at::empty({10, 3}, at::kBFloat16), 0}}, false), Error);
  auto out = at::empty({3, 10}, at::kBFloat16);
  split_hi_lo_into({{t, out, 1}}, false);
  EXPECT_TRUE(at::equal(out, split_hi_lo(t, at::kBFloat16, 1)));
}

}  // namespace
}  // namespace finetune
