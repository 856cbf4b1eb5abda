// Activation offloading on a GPU (Note [Activation offloading]): the checkpointed layer inputs go
// to pinned host memory on a side stream and come back ahead of each recompute; with the events
// ordering the copies, loss and adapter gradients are bit for bit those of keeping the inputs on
// the device. fp32 through ATen's math attention (deterministic), so any difference is the copies'.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include "../lora/adapter_step_gradients.h"
#include "../model/tiny_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/loss.h"

namespace finetune {
namespace {

TEST(ActivationOffloadCuda, LossAndGradientsAreBitwiseEqualWithOffloading) {
  const at::Device device(at::kCUDA, 0);
  at::globalContext().setSDPUseFlash(false);
  at::globalContext().setSDPUseMemEfficient(false);
  CausalLM model(tiny_llama_config({512, 256, 688, 4, 4, 2, 64}), at::kFloat, device);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  {
    at::NoGradGuard no_grad;
    for (auto& [name, parameter] : model.named_parameters()) {
      parameter.copy_(at::empty(parameter.sizes()).normal_(0.0, 0.05, generator).to(device));
    }
  }
  LoraConfig lora;
  lora.r = 8;
  lora.lora_alpha = 16;
  lora.target_modules = {"q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"};
  attach_lora(model, lora, 1);
  {
    at::NoGradGuard no_grad;
    for (auto& [name, tensor] : lora_parameters(model)) {
      tensor.copy_(at::empty(tensor.sizes()).normal_(0.0, 0.05, generator).to(device));
    }
  }
  const auto ids = at::randint(0, 512, {2, 2048}, generator, at::TensorOptions().dtype(at::kLong)).to(device);
  const auto positions = at::arange(2048, at::TensorOptions().dtype(at::kLong)).repeat({2, 1}).to(device);

  auto step = [&](std::optional<int64_t> offload_above_bytes) {
    for (auto& [name, tensor] : lora_parameters(model)) tensor.mutable_grad() = at::Tensor();
    ForwardOptions options;
    options.training = true;
    options.gradient_checkpointing = true;
    options.offload_activations_above_bytes = offload_above_bytes;
    auto loss = causal_lm_loss_sum(model, model.forward_hidden(ids, positions, AttentionMask{}, options), ids);
    loss.backward();
    std::vector<at::Tensor> out{loss.detach().cpu()};
    for (auto& [name, tensor] : lora_parameters(model)) out.push_back(tensor.grad().cpu());
    return out;
  };
  const auto kept = step(std::nullopt);
  for (int repeat = 0; repeat < 3; ++repeat) {
    const auto offloaded = step(0);
    ASSERT_EQ(kept.size(), offloaded.size());
    for (size_t i = 0; i < kept.size(); ++i) {
      EXPECT_TRUE(at::equal(kept[i], offloaded[i])) << "tensor " << i << ", repeat " << repeat;
    }
  }
  at::globalContext().setSDPUseFlash(true);
  at::globalContext().setSDPUseMemEfficient(true);
}

}  // namespace
}  // namespace finetune
