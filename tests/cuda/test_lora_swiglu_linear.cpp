// The LoRA down projection fed by gate and up (Note [SwiGLU into the down projection] in
// lora/half_precision_lora_linear.cpp) on the GPU, as the CUDA policy runs it:
//  - output and every gradient (gate, up, lora_A, lora_B) equal the fused SwiGLU followed by
//    half_precision_lora_linear bit for bit: bf16 and fp16, the operand cache on and off, with and
//    without a bias;
//  - the node keeps no (N, I) product between its forward and backward;
//  - LoraAdapter::forward_swiglu takes it exactly where the one-node path and the fused kernels
//    run, and leaves dropout, fp32 and non-contiguous inputs to the caller's composition.
#include <gtest/gtest.h>

#include <c10/cuda/CUDACachingAllocator.h>

#include "finetune/lora/half_precision_lora_linear.h"
#include "finetune/model/fused_kernels.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/model/linear.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

constexpr int64_t kTokens = 512, kWidth = 1024, kOut = 384, kRank = 16;

struct Projection {
  Linear base;
  LoraAdapter adapter;
};

void make_projection(Projection& p, at::ScalarType dtype, bool cache_operands, bool bias) {
  const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  at::manual_seed(31);
  p.base.weight = (at::randn({kOut, kWidth}, options) / 30).to(dtype);
  if (bias) p.base.bias = (at::randn({kOut}, options) / 10).to(dtype);
  p.base.compute_dtype = dtype;
  p.adapter.lora_A = (at::randn({kRank, kWidth}, options) / 10).requires_grad_(true);
  p.adapter.lora_B = (at::randn({kOut, kRank}, options) / 10).requires_grad_(true);
  p.adapter.scaling = 2.0;
  p.adapter.kernels = choose_kernel_policy(at::Device(at::kCUDA, 0), dtype, ModelConfig{});
  p.adapter.cache_operands = cache_operands;
}

int64_t allocated_bytes() {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

TEST(LoraSwigluLinear, EqualsTheSwigluThenTheLoraLinearBitForBit) {
  const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  for (const auto dtype : cuda_testing::half_dtypes()) {
    for (const bool cache_operands : {true, false}) {
      for (const bool bias : {false, true}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + (cache_operands ? " cached" : " per use") +
                     (bias ? " bias" : ""));
        Projection composed, fused;
        make_projection(composed, dtype, cache_operands, bias);
        make_projection(fused, dtype, cache_operands, bias);
        at::manual_seed(32);
        const auto gate = at::randn({2, kTokens / 2, kWidth}, options).to(dtype);
        const auto up = at::randn({2, kTokens / 2, kWidth}, options).to(dtype);
        const auto grad_out = at::randn({2, kTokens / 2, kOut}, options).to(dtype);
        auto gate_a = gate.clone().requires_grad_(true), up_a = up.clone().requires_grad_(true);
        auto y_a = half_precision_lora_linear(fused_swiglu(gate_a, up_a), composed.base, composed.adapter);
        y_a.backward(grad_out);
        // The node's inputs are its own (it writes their gradients over them): not the leaves.
        auto gate_b = gate.clone().requires_grad_(true), up_b = up.clone().requires_grad_(true);
        auto y_b = half_precision_lora_swiglu_linear(gate_b * 1, up_b * 1, fused.base, fused.adapter);
        y_b.backward(grad_out);
        EXPECT_TRUE(cuda_testing::equal_values(y_b, y_a));
        EXPECT_TRUE(cuda_testing::equal_values(gate_b.grad(), gate_a.grad()));
        EXPECT_TRUE(cuda_testing::equal_values(up_b.grad(), up_a.grad()));
        EXPECT_TRUE(cuda_testing::equal_values(fused.adapter.lora_A.grad(), composed.adapter.lora_A.grad()));
        EXPECT_TRUE(cuda_testing::equal_values(fused.adapter.lora_B.grad(), composed.adapter.lora_B.grad()));
      }
    }
  }
}

// Between forward and backward the composition keeps silu(gate) * up (the LoRA node's input); this
// node keeps only gate and up, which the caller's SwiGLU node kept too.
TEST(LoraSwigluLinear, KeepsNoProductBetweenForwardAndBackward) {
  const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  Projection p;
  make_projection(p, at::kBFloat16, /*cache_operands=*/true, /*bias=*/false);
  const auto gate = at::randn({kTokens, kWidth}, options).to(at::kBFloat16).requires_grad_(true);
  const auto up = at::randn({kTokens, kWidth}, options).to(at::kBFloat16).requires_grad_(true);
  half_precision_lora_linear(fused_swiglu(gate, up), p.base, p.adapter);  // the operands cached, warm-up
  const auto kept = [&](bool fused) {
    const auto before = allocated_bytes();
    auto y = fused ? half_precision_lora_swiglu_linear(gate * 1, up * 1, p.base, p.adapter)
                   : half_precision_lora_linear(fused_swiglu(gate * 1, up * 1), p.base, p.adapter);
    return allocated_bytes() - before;  // y and what its graph keeps
  };
  const int64_t product_bytes = kTokens * kWidth * 2;
  const int64_t composed = kept(false), fused = kept(true);
  EXPECT_EQ(composed - fused, product_bytes) << composed << " vs " << fused;
}

TEST(LoraSwigluLinear, TheAdapterTakesItWhereTheFusedPathRuns) {
  const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  Projection p;
  make_projection(p, at::kBFloat16, true, false);
  const auto gate = at::randn({64, kWidth}, options).to(at::kBFloat16);
  const auto up = at::randn({64, kWidth}, options).to(at::kBFloat16);
  auto y = p.adapter.forward_swiglu(p.base, gate.clone(), up.clone(), /*training=*/true);
  ASSERT_TRUE(y.defined());
  EXPECT_NE(y.grad_fn(), nullptr);
  EXPECT_TRUE(cuda_testing::equal_values(y, half_precision_lora_linear(fused_swiglu(gate, up), p.base, p.adapter)));
  // Not where the composition must run: a dropout mask drawn in training, fp32, strided inputs.
  p.adapter.dropout = 0.1;
  EXPECT_FALSE(p.adapter.forward_swiglu(p.base, gate.clone(), up.clone(), /*training=*/true).defined());
  EXPECT_TRUE(p.adapter.forward_swiglu(p.base, gate.clone(), up.clone(), /*training=*/false).defined());
  p.adapter.dropout = 0.0;
  EXPECT_FALSE(p.adapter.forward_swiglu(p.base, gate.to(at::kFloat), up.to(at::kFloat), true).defined());
  const auto wide = at::randn({64, 2 * kWidth}, options).to(at::kBFloat16);
  EXPECT_FALSE(p.adapter.forward_swiglu(p.base, wide.narrow(1, 0, kWidth), up.clone(), true).defined());
}

}  // namespace
}  // namespace finetune
