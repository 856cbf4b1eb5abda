// LoRA operands split per use (Note [Operands split per use] in lora/half_precision_lora_linear.cpp)
// on the GPU, with the split kernel and fp32-output GEMMs as the CUDA policy runs them:
//  - the split kernel's jobs passed as arguments (two targets) split as its job table does;
//  - output and gradients equal the cached operands' bit for bit, bf16 and fp16;
//  - in a CUDA graph the split is part of the replay: after an in-place update of lora_A and
//    lora_B (as the optimizer makes), a replay with no refresh gives the eager result of the new
//    values, and the adapter keeps no operands between forwards.
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>

#include "finetune/lora/half_precision_lora_linear.h"
#include "finetune/lora/lora_kernels.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/model/linear.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

struct Projection {
  Linear base;
  LoraAdapter adapter;
};

void make_projection(Projection& p, at::ScalarType dtype, bool cache_operands) {
  const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  at::manual_seed(21);
  const int64_t in = 512, out = 384, r = 16;
  p.base.weight = (at::randn({out, in}, options) / 20).to(dtype);
  p.base.compute_dtype = dtype;
  p.adapter.lora_A = (at::randn({r, in}, options) / 10).requires_grad_(true);
  p.adapter.lora_B = (at::randn({out, r}, options) / 10).requires_grad_(true);
  p.adapter.scaling = 2.0;
  p.adapter.kernels = choose_kernel_policy(at::Device(at::kCUDA, 0), dtype, ModelConfig{});
  p.adapter.cache_operands = cache_operands;
}

TEST(LoraOperandsPerUse, EqualTheCachedOperandsBitForBit) {
  for (const auto dtype : cuda_testing::half_dtypes()) {
    SCOPED_TRACE(c10::toString(dtype));
    Projection cached, per_use;
    make_projection(cached, dtype, true);
    make_projection(per_use, dtype, false);
    const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
    const auto x = at::randn({300, 512}, options).to(dtype);
    const auto grad_out = at::randn({300, 384}, options).to(dtype);
    auto x_cached = x.clone().requires_grad_(true), x_per_use = x.clone().requires_grad_(true);
    auto y_cached = half_precision_lora_linear(x_cached, cached.base, cached.adapter);
    auto y_per_use = half_precision_lora_linear(x_per_use, per_use.base, per_use.adapter);
    y_cached.backward(grad_out);
    y_per_use.backward(grad_out);
    EXPECT_TRUE(cuda_testing::equal_values(y_per_use, y_cached));
    EXPECT_TRUE(cuda_testing::equal_values(x_per_use.grad(), x_cached.grad()));
    EXPECT_TRUE(cuda_testing::equal_values(per_use.adapter.lora_A.grad(), cached.adapter.lora_A.grad()));
    EXPECT_TRUE(cuda_testing::equal_values(per_use.adapter.lora_B.grad(), cached.adapter.lora_B.grad()));
    EXPECT_FALSE(per_use.adapter.half_precision_operands);
  }
}

// Two targets travel as the kernel's arguments, three in a device table: the same values.
TEST(LoraOperandsPerUse, JobsAsArgumentsSplitAsTheJobTable) {
  const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  at::manual_seed(22);
  const auto A = at::randn({16, 300}, options), B = at::randn({200, 16}, options), C = at::randn({7, 5}, options);
  const auto out_like = [](const at::Tensor& t, int64_t dim) {
    return at::empty({t.size(0) * (dim == 0 ? 2 : 1), t.size(1) * (dim == 1 ? 2 : 1)},
                     t.options().dtype(at::kBFloat16));
  };
  const auto A2 = out_like(A, 0), B2 = out_like(B, 1), A3 = out_like(A, 0), B3 = out_like(B, 1), C3 = out_like(C, 1);
  split_hi_lo_into({{A, A2, 0}, {B, B2, 1}}, /*cuda_kernel=*/true);
  split_hi_lo_into({{A, A3, 0}, {B, B3, 1}, {C, C3, 1}}, /*cuda_kernel=*/true);
  EXPECT_TRUE(cuda_testing::equal_values(A2, A3));
  EXPECT_TRUE(cuda_testing::equal_values(B2, B3));
  EXPECT_TRUE(cuda_testing::equal_values(A2, split_hi_lo(A, at::kBFloat16, 0)));
  EXPECT_TRUE(cuda_testing::equal_values(C3, split_hi_lo(C, at::kBFloat16, 1)));
}

TEST(LoraOperandsPerUse, AReplaySplitsTheUpdatedAdapterWithoutARefresh) {
  Projection p;
  make_projection(p, at::kBFloat16, false);
  const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  const auto x = at::randn({64, 512}, options).to(at::kBFloat16);
  const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0));
  half_precision_lora_linear(x, p.base, p.adapter);  // warm-up on the capturing stream
  at::cuda::CUDAGraph graph;
  at::Tensor y;
  {
    at::NoGradGuard no_grad;
    graph.capture_begin();
    y = half_precision_lora_linear(x, p.base, p.adapter);
    graph.capture_end();
  }
  {
    at::NoGradGuard no_grad;
    p.adapter.lora_A.mul_(1.5);  // an optimizer step, in place
    p.adapter.lora_B.add_(0.01);
  }
  graph.replay();
  at::Tensor eager;
  {
    at::NoGradGuard no_grad;
    eager = half_precision_lora_linear(x, p.base, p.adapter);
  }
  at::cuda::device_synchronize();
  EXPECT_TRUE(cuda_testing::equal_values(y, eager));
  EXPECT_FALSE(p.adapter.half_precision_operands);
}

}  // namespace
}  // namespace finetune
