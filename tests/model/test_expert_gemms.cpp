// The expert-stack GEMMs (model/expert_gemms.h) on the CPU: a 4-bit stack's forward and its rows'
// gradient are those of the same stack held as its dequantized dense weight, bit for bit, through
// the whole expert MLP with experts no row reaches and with an expert adapter (whose gradients
// match too); nothing of the 16-bit stack is kept for the backward pass.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "../reference/tensor_fixtures.h"
#include "expert_stack_4bit_cases.h"
#include "finetune/model/expert_gemms.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using reference::same_bits;
using testing_moe::layers_4bit_and_dense;
using testing_moe::random_adapter;

MoeConfig moe_config(int64_t experts, int64_t top_k) {
  MoeConfig config;
  config.num_experts = experts;
  config.num_experts_per_tok = top_k;
  config.norm_topk_prob = true;
  return config;
}

TEST(ExpertGemms, PerExpertGemmSkipsExpertsWithoutRowsAndItsInputGradIsTheTranspose) {
  at::manual_seed(0);
  const auto weight = at::randn({3, 5, 4}, at::kDouble);
  const auto rows = at::randn({6, 4}, at::kDouble);
  ExpertGemmPlan plan;
  plan.counts = {2, 0, 4};
  const auto out = experts_gemm(weight, rows, plan);  // (6, 5)
  EXPECT_TRUE(at::allclose(out.narrow(0, 0, 2), at::matmul(rows.narrow(0, 0, 2), weight[0].t())));
  EXPECT_TRUE(at::allclose(out.narrow(0, 2, 4), at::matmul(rows.narrow(0, 2, 4), weight[2].t())));
  const auto dy = at::randn({6, 5}, at::kDouble);
  const auto dx = experts_gemm_input_grad(weight, dy, plan);  // (6, 4)
  EXPECT_TRUE(at::allclose(dx.narrow(0, 2, 4), at::matmul(dy.narrow(0, 2, 4), weight[2])));
}

TEST(ExpertGemms, FourBitStacksComputeAsTheirDequantizedWeights) {
  at::manual_seed(1);
  const int64_t experts = 6, hidden = 64, width = 32;
  auto [quantized, dense] = layers_4bit_and_dense(experts, hidden, width, at::kFloat, at::kCPU);
  for (bool with_adapter : {false, true}) {
    SCOPED_TRACE(with_adapter ? "with an expert adapter" : "base only");
    if (with_adapter) {
      quantized.gate_up_proj.adapter = random_adapter(quantized.gate_up_proj, 2, at::kCPU);
      quantized.down_proj.adapter = random_adapter(quantized.down_proj, 2, at::kCPU);
      dense.gate_up_proj.adapter = quantized.gate_up_proj.adapter;
      dense.down_proj.adapter = quantized.down_proj.adapter;
    }
    const auto config = moe_config(experts, 2);
    const auto x = at::randn({5, hidden}).requires_grad_();  // 10 assignments over 6 experts: some unreached
    const auto routing = route_tokens(quantized.router, x.detach(), config);
    const auto got = experts_forward(quantized, x, routing, config, KernelPolicy{});
    const auto want = experts_forward(dense, x, routing, config, KernelPolicy{});
    EXPECT_TRUE(same_bits(got, want));
    const auto upstream = at::randn_like(got);
    std::vector<at::Tensor> inputs{x};
    if (with_adapter) {
      for (const auto* stack : {&quantized.gate_up_proj, &quantized.down_proj}) {
        for (const auto& [name, tensor] : stack->adapter->named_parameters()) inputs.push_back(tensor);
      }
    }
    const auto got_grads = torch::autograd::grad({got}, inputs, {upstream});
    const auto want_grads = torch::autograd::grad({want}, inputs, {upstream});
    for (size_t i = 0; i < inputs.size(); ++i) EXPECT_TRUE(same_bits(got_grads[i], want_grads[i])) << "input " << i;
  }
}

TEST(ExpertGemms, MergedWeightOfA4bitStackDequantizesFirst) {
  at::manual_seed(2);
  auto [quantized, dense] = layers_4bit_and_dense(3, 64, 16, at::kFloat, at::kCPU);
  quantized.down_proj.adapter = random_adapter(quantized.down_proj, 2, at::kCPU);
  dense.down_proj.adapter = quantized.down_proj.adapter;
  EXPECT_TRUE(same_bits(quantized.down_proj.merged_weight(), dense.down_proj.merged_weight()));
  EXPECT_TRUE(same_bits(quantized.gate_up_proj.merged_weight(), dense.gate_up_proj.weight));
}

TEST(ExpertGemms, StackPiecesMustCoverEveryExpertOnce) {
  at::manual_seed(3);
  auto stack = *testing_moe::quantize_stack(at::randn({2, 8, 64}), 4);
  EXPECT_NO_THROW(check_nf4_stack(stack, "test"));
  stack.pieces.pop_back();
  EXPECT_THROW(check_nf4_stack(stack, "test"), Error);
}

}  // namespace
}  // namespace finetune
