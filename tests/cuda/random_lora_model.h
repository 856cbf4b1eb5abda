// The tiny bf16 Llama with random weights and a LoRA adapter on every projection (lora_B random
// too, so the adapter changes the output) that the graphed micro-step tests train on the GPU, and
// its QLoRA twin: the same random projections quantized to NF4 on the GPU.
#pragma once

#include <memory>
#include <string>

#include <ATen/cuda/CUDAGeneratorImpl.h>

#include "../model/tiny_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/quant/nf4.h"

namespace finetune::testing {

inline LoraConfig random_model_lora_config() {
  LoraConfig lora;
  lora.r = 8;
  lora.lora_alpha = 16;
  lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return lora;
}

inline constexpr uint64_t kRandomModelLoraSeed = 3;

// Norm weights 1, every other base weight N(0, 0.05) from `generator`.
inline void randomize_base_weights(CausalLM& model, at::Generator& generator) {
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : model.named_parameters()) {
    if (name.find("norm") != std::string::npos) {
      parameter.fill_(1.0);
    } else {
      parameter.normal_(0.0, 0.05, generator);
    }
  }
}

// Every lora_B N(0, 0.05) from `generator` (PEFT starts them at 0), so the adapters change the output.
inline void randomize_lora_b(CausalLM& model, at::Generator& generator) {
  at::NoGradGuard no_grad;
  for (auto& [name, tensor] : lora_parameters(model)) {
    if (name.find("lora_B") != std::string::npos) tensor.detach().normal_(0.0, 0.05, generator);
  }
}

// Every decoder projection of a `projections_4bit` model: N(0, 0.05) from `generator` in bf16,
// then NF4 with nested statistics (bitsandbytes' QLoRA defaults, quantize_nf4).
inline void quantize_random_projections(CausalLM& model, at::Generator& generator) {
  at::NoGradGuard no_grad;
  const auto options = at::TensorOptions().dtype(at::kBFloat16).device(model.device());
  for (auto& [name, linear] : model.named_linears()) {
    const auto dense = at::empty(linear->weight.sizes(), options).normal_(0.0, 0.05, generator);
    linear->weight_4bit = std::make_shared<const Nf4Weight>(quantize_nf4(dense));
  }
}

// `projections_4bit`: the QLoRA model (4-bit decoder projections, Note [4-bit base weights]).
inline std::unique_ptr<CausalLM> random_lora_model(const at::Device& device, bool projections_4bit = false) {
  auto model = std::make_unique<CausalLM>(tiny_llama_config({512, 256, 512, 2, 4, 2, 64}), at::kBFloat16, device,
                                          projections_4bit);
  auto generator = at::cuda::detail::createCUDAGenerator();
  generator.set_current_seed(11);
  at::NoGradGuard no_grad;  // over attach_lora too
  randomize_base_weights(*model, generator);
  if (projections_4bit) quantize_random_projections(*model, generator);
  attach_lora(*model, random_model_lora_config(), kRandomModelLoraSeed);
  randomize_lora_b(*model, generator);
  return model;
}

}  // namespace finetune::testing
