// 4-bit expert stacks on the GPU (Note [4-bit expert stacks] in model/moe_block.h): the NF4 pieces
// quantized on the CPU and moved to the GPU dequantize with the CUDA kernel to the CPU's values bit
// for bit; the expert MLP over 4-bit stacks equals, bit for bit, the same MLP over the dequantized
// stacks held dense (bf16 grouped GEMMs, with and without an expert adapter, forward and every
// gradient); fp32 on the GPU (one GEMM per expert) matches the CPU 4-bit path within GEMM summation
// order; and a forward keeps no 16-bit copy of a stack for its backward pass.
#include <gtest/gtest.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/autograd/autograd.h>

#include "../model/expert_stack_4bit_cases.h"
#include "../reference/tensor_fixtures.h"

namespace finetune {
namespace {

using reference::same_bits;
using testing_moe::layers_4bit_and_dense;
using testing_moe::random_adapter;

const at::Device kCuda(at::kCUDA, 0);

std::shared_ptr<const Nf4Stack> stack_on(const Nf4Stack& stack, at::Device device) {
  auto out = std::make_shared<Nf4Stack>(stack);
  for (auto& piece : out->pieces) piece.weight = piece.weight.to(device);
  return out;
}

// `layer` (4-bit stacks on the CPU) with every tensor on `device`.
MoeLayer layer_on(const MoeLayer& layer, at::Device device) {
  MoeLayer out = testing_moe::sparse_copy(layer);
  out.router = layer.router.to(device);
  for (auto* stack : {&out.gate_up_proj, &out.down_proj}) stack->weight_4bit = stack_on(*stack->weight_4bit, device);
  return out;
}

MoeConfig moe_config(int64_t experts, int64_t top_k) {
  MoeConfig config;
  config.num_experts = experts;
  config.num_experts_per_tok = top_k;
  config.norm_topk_prob = true;
  config.routing_weights_in_model_dtype = true;
  return config;
}

int64_t allocated_bytes() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
}

TEST(Moe4bitExperts, CudaDequantizationEqualsTheCpus) {
  at::manual_seed(0);
  for (auto dtype : {at::kBFloat16, at::kFloat}) {
    const auto cpu = testing_moe::quantize_stack(at::randn({4, 96, 128}).to(dtype), 48);
    const auto gpu = stack_on(*cpu, kCuda);
    EXPECT_TRUE(same_bits(dequantize_nf4_stack(*gpu, dtype).cpu(), dequantize_nf4_stack(*cpu, dtype))) << dtype;
  }
}

TEST(Moe4bitExperts, GroupedBf16ForwardAndGradientsEqualTheDequantizedDenseStacks) {
  at::manual_seed(1);
  const int64_t experts = 8, hidden = 128, width = 64;
  auto [quantized, dense] = layers_4bit_and_dense(experts, hidden, width, at::kBFloat16, kCuda);
  const auto config = moe_config(experts, 2);
  for (bool with_adapter : {false, true}) {
    SCOPED_TRACE(with_adapter ? "with expert adapters" : "base only");
    if (with_adapter) {
      quantized.gate_up_proj.adapter = random_adapter(quantized.gate_up_proj, 8, kCuda);
      quantized.down_proj.adapter = random_adapter(quantized.down_proj, 8, kCuda);
      dense.gate_up_proj.adapter = quantized.gate_up_proj.adapter;
      dense.down_proj.adapter = quantized.down_proj.adapter;
    }
    const auto x = at::randn({3, hidden}, at::TensorOptions().dtype(at::kBFloat16).device(kCuda)).requires_grad_();
    const auto routing = route_tokens(quantized.router, x.detach(), config);  // 6 assignments: experts unreached
    const auto got = experts_forward(quantized, x, routing, config, KernelPolicy{});
    const auto want = experts_forward(dense, x, routing, config, KernelPolicy{});
    EXPECT_TRUE(same_bits(got, want));
    std::vector<at::Tensor> inputs{x};
    if (with_adapter) {
      for (const auto* stack : {&quantized.gate_up_proj, &quantized.down_proj})
        for (const auto& [name, tensor] : stack->adapter->named_parameters()) inputs.push_back(tensor);
    }
    const auto upstream = at::randn_like(got);
    const auto got_grads = torch::autograd::grad({got}, inputs, {upstream});
    const auto want_grads = torch::autograd::grad({want}, inputs, {upstream});
    for (size_t i = 0; i < inputs.size(); ++i) EXPECT_TRUE(same_bits(got_grads[i], want_grads[i])) << "input " << i;
  }
}

TEST(Moe4bitExperts, Fp32GpuForwardMatchesTheCpu4bitForward) {
  at::manual_seed(2);
  const int64_t experts = 4, hidden = 64, width = 32;
  auto [cpu_layer, unused] = layers_4bit_and_dense(experts, hidden, width, at::kFloat, at::kCPU);
  const auto gpu_layer = layer_on(cpu_layer, kCuda);
  const auto config = moe_config(experts, 2);
  const auto x = at::randn({7, hidden});
  const auto routing = route_tokens(cpu_layer.router, x, config);
  Routing gpu_routing{routing.logits.to(kCuda), routing.weights.to(kCuda), routing.experts.to(kCuda)};
  const auto want = experts_forward(cpu_layer, x, routing, config, KernelPolicy{});
  const auto got = experts_forward(gpu_layer, x.to(kCuda), gpu_routing, config, KernelPolicy{}).cpu();
  const double error = ((got - want).norm() / want.norm()).item<double>();
  EXPECT_LE(error, 1e-6) << "relative L2 error " << error;  // fp32 GEMMs, different summation order
}

TEST(Moe4bitExperts, ForwardKeepsNo16bitStackForBackward) {
  at::manual_seed(3);
  const int64_t experts = 16, hidden = 256, width = 512;
  auto [quantized, dense] = layers_4bit_and_dense(experts, hidden, width, at::kBFloat16, kCuda);
  dense = MoeLayer();  // only the 4-bit stacks stay resident
  const auto config = moe_config(experts, 2);
  const auto x = at::randn({32, hidden}, at::TensorOptions().dtype(at::kBFloat16).device(kCuda)).requires_grad_();
  const auto routing = route_tokens(quantized.router, x.detach(), config);
  const int64_t before = allocated_bytes();
  const auto out = experts_forward(quantized, x, routing, config, KernelPolicy{});
  const int64_t kept = allocated_bytes() - before;
  const int64_t smallest_stack = experts * hidden * width * 2;  // down_proj in bf16
  EXPECT_LT(kept, smallest_stack / 4) << "the forward kept " << kept << " bytes for backward";
  out.sum().backward();
  EXPECT_TRUE(x.grad().defined());
}

}  // namespace
}  // namespace finetune
