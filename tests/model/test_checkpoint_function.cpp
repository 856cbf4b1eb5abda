// Gradient checkpointing recomputes each layer in backward and gives the gradients of the plain
// forward, bit for bit, also with LoRA dropout (the recompute replays the first run's RNG state).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "../model/tiny_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/loss.h"

namespace finetune {
namespace {

void seed_default_generator(uint64_t seed) {
  auto generator = at::globalContext().defaultGenerator(at::kCPU);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(seed);
}

std::vector<at::Tensor> gradients(CausalLM& model, bool checkpointing, uint64_t seed = 11) {
  for (auto& [name, tensor] : lora_parameters(model)) tensor.mutable_grad() = at::Tensor();
  seed_default_generator(seed);
  auto ids = at::tensor({3, 7, 1, 9, 4, 4, 8, 2, 6, 5, 1, 3}, at::kLong).view({2, 6});
  auto positions = at::arange(6, at::kLong).repeat({2, 1});
  ForwardOptions options;
  options.training = true;
  options.gradient_checkpointing = checkpointing;
  auto hidden = model.forward_hidden(ids, positions, AttentionMask{}, options);
  causal_lm_loss_sum(model, hidden, ids).backward();
  std::vector<at::Tensor> out;
  for (auto& [name, tensor] : lora_parameters(model)) out.push_back(tensor.grad().clone());
  return out;
}

TEST(CheckpointFunction, RecomputeWithDropoutGivesIdenticalGradients) {
  CausalLM model(tiny_llama_config({16, 32, 48, 3, 4, 2, 8}), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(2);
  {
    at::NoGradGuard no_grad;
    for (auto& [name, parameter] : model.named_parameters()) parameter.normal_(0.0, 0.3, generator);
  }
  LoraConfig lora;
  lora.r = 4;
  lora.lora_alpha = 8;
  lora.lora_dropout = 0.3;
  lora.target_modules = {"q_proj", "v_proj", "up_proj", "down_proj"};
  attach_lora(model, lora, 1);
  for (auto& [name, tensor] : lora_parameters(model)) tensor.detach().normal_(0.0, 0.2, generator);

  const auto plain = gradients(model, false);
  const auto recomputed = gradients(model, true);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(at::equal(plain[i], recomputed[i])) << "gradient " << i;
    EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << "gradient " << i;
  }
  // Dropout is really on: another seed gives other gradients.
  EXPECT_FALSE(at::equal(plain[0], gradients(model, false, /*seed=*/12)[0]));
}

}  // namespace
}  // namespace finetune
