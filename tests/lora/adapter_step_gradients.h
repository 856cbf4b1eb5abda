// One training step of a tiny model's adapters, for tests that compare two ways of running it
// (gradient checkpointing on and off, with LoRA or DoRA dropout drawing from the default CPU
// generator).
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/loss.h"

namespace finetune {

// Reseeds the default CPU generator, the one dropout draws from.
inline void seed_default_generator(uint64_t seed) {
  auto generator = at::globalContext().defaultGenerator(at::kCPU);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(seed);
}

// Fills every base parameter with N(0, 0.3) drawn from `generator`.
inline void randomize_base(CausalLM& model, at::Generator& generator) {
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : model.named_parameters()) parameter.normal_(0.0, 0.3, generator);
}

// r 4, alpha 8 and `dropout` on `targets`: the small adapters these tests attach.
inline LoraConfig small_lora(double dropout, std::vector<std::string> targets) {
  LoraConfig lora;
  lora.r = 4;
  lora.lora_alpha = 8;
  lora.lora_dropout = dropout;
  lora.target_modules = std::move(targets);
  return lora;
}

// The adapters' gradients (lora_parameters order) of the token-loss sum of one fixed (2, 6)
// batch, training mode, dropout drawn after reseeding with `seed`.
inline std::vector<at::Tensor> adapter_step_gradients(CausalLM& model, bool checkpointing, uint64_t seed = 11) {
  for (auto& [name, tensor] : lora_parameters(model)) tensor.mutable_grad() = at::Tensor();
  seed_default_generator(seed);
  auto ids = at::tensor({3, 7, 1, 9, 4, 4, 8, 2, 6, 5, 1, 3}, at::kLong).view({2, 6});
  auto positions = at::arange(6, at::kLong).repeat({2, 1});
  ForwardOptions options;
  options.training = true;
  options.gradient_checkpointing = checkpointing;
  causal_lm_loss_sum(model, model.forward_hidden(ids, positions, AttentionMask{}, options), ids).backward();
  std::vector<at::Tensor> out;
  for (auto& [name, tensor] : lora_parameters(model)) out.push_back(tensor.grad().clone());
  return out;
}

}  // namespace finetune
