// Gradient checkpointing recomputes each layer in backward and gives the gradients of the plain
// forward, bit for bit, also with LoRA dropout (the recompute replays the first run's RNG state).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "../lora/adapter_step_gradients.h"
#include "../model/tiny_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"

namespace finetune {
namespace {

TEST(CheckpointFunction, RecomputeWithDropoutGivesIdenticalGradients) {
  CausalLM model(tiny_llama_config({16, 32, 48, 3, 4, 2, 8}), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(2);
  randomize_base(model, generator);
  attach_lora(model, small_lora(0.3, {"q_proj", "v_proj", "up_proj", "down_proj"}), 1);
  for (auto& [name, tensor] : lora_parameters(model)) tensor.detach().normal_(0.0, 0.2, generator);

  const auto plain = adapter_step_gradients(model, false);
  const auto recomputed = adapter_step_gradients(model, true);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(at::equal(plain[i], recomputed[i])) << "gradient " << i;
    EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << "gradient " << i;
  }
  // Dropout is really on: another seed gives other gradients.
  EXPECT_FALSE(at::equal(plain[0], adapter_step_gradients(model, false, /*seed=*/12)[0]));
}

}  // namespace
}  // namespace finetune
