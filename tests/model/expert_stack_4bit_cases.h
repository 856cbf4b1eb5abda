// A sparse MoE layer whose expert stacks are 4-bit (Note [4-bit expert stacks] in
// model/moe_block.h) beside the same layer with the dequantized stacks as dense weights, for the
// CPU (tests/model/test_expert_gemms.cpp) and CUDA (tests/cuda/test_moe_4bit_experts.cpp) tests.
#pragma once

#include <memory>
#include <utility>

#include "finetune/lora/expert_lora_adapter.h"
#include "finetune/model/moe_block.h"
#include "finetune/quant/nf4_stack.h"

namespace finetune::testing_moe {

// `weight` (E, out, in) quantized per expert in pieces of `piece_rows` rows (as a checkpoint's
// per-expert gate/up tensors), with bitsandbytes' double quantization.
inline std::shared_ptr<const Nf4Stack> quantize_stack(const at::Tensor& weight, int64_t piece_rows) {
  auto stack = std::make_shared<Nf4Stack>();
  stack->shape = weight.sizes().vec();
  stack->dtype = weight.scalar_type();
  for (int64_t e = 0; e < weight.size(0); ++e) {
    for (int64_t row = 0; row < weight.size(1); row += piece_rows) {
      stack->pieces.push_back({e, row, quantize_nf4(weight[e].narrow(0, row, piece_rows).contiguous(), true)});
    }
  }
  return stack;
}

// A sparse layer's router and stacks (MoeLayer itself is move-only: its dense Linears own adapters).
inline MoeLayer sparse_copy(const MoeLayer& layer) {
  MoeLayer out;
  out.sparse = layer.sparse;
  out.router = layer.router;
  out.gate_up_proj = layer.gate_up_proj;
  out.down_proj = layer.down_proj;
  return out;
}

// (4-bit layer, the same layer with dense_weight() as its stacks' weights); `device` for both.
inline std::pair<MoeLayer, MoeLayer> layers_4bit_and_dense(int64_t experts, int64_t hidden, int64_t width,
                                                           at::ScalarType dtype, at::Device device) {
  MoeLayer quantized;
  quantized.sparse = true;
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  quantized.router = at::randn({experts, hidden}, options);
  const auto gate_up = at::randn({experts, 2 * width, hidden}, options) * 0.3;
  const auto down = at::randn({experts, hidden, width}, options) * 0.3;
  quantized.gate_up_proj.weight = at::empty(gate_up.sizes(), options.device(at::kMeta));
  quantized.gate_up_proj.weight_4bit = quantize_stack(gate_up, width);  // gate rows, then up rows
  quantized.down_proj.weight = at::empty(down.sizes(), options.device(at::kMeta));
  quantized.down_proj.weight_4bit = quantize_stack(down, hidden);
  MoeLayer dense = sparse_copy(quantized);
  dense.gate_up_proj.weight = quantized.gate_up_proj.dense_weight();
  dense.gate_up_proj.weight_4bit = nullptr;
  dense.down_proj.weight = quantized.down_proj.dense_weight();
  dense.down_proj.weight_4bit = nullptr;
  return {std::move(quantized), std::move(dense)};
}

// A trainable PEFT-layout adapter (r*E, in) / (out, r*E) for `stack`, fp32 on `device`.
inline std::shared_ptr<ExpertLoraAdapter> random_adapter(const ExpertStack& stack, int64_t rank, at::Device device) {
  auto adapter = std::make_shared<ExpertLoraAdapter>();
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  adapter->lora_A = (at::randn({rank * stack.num_experts(), stack.in_features()}, options) * 0.1).requires_grad_();
  adapter->lora_B = (at::randn({stack.out_features(), rank * stack.num_experts()}, options) * 0.1).requires_grad_();
  adapter->num_experts = stack.num_experts();
  adapter->scaling = 2.0;
  return adapter;
}

}  // namespace finetune::testing_moe
