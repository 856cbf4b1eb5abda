// A tiny random Llama with LoRA and a few samples, shared by the evaluation tests.
#pragma once

#include <ATen/CPUGeneratorImpl.h>

#include <memory>
#include <string>
#include <vector>

#include "../model/tiny_config.h"
#include "finetune/data/sample.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"

namespace finetune::evaluate_test {

// Deterministic: every call (every rank) builds the same weights.
inline std::unique_ptr<CausalLM> random_model() {
  auto model = std::make_unique<CausalLM>(tiny_llama_config({64, 32, 48, 2, 4, 2, 8}), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : model->named_parameters()) {
    if (name.find("norm") != std::string::npos) {
      parameter.fill_(1.0);
    } else {
      parameter.normal_(0.0, 0.2, generator);
    }
  }
  LoraConfig lora;
  lora.r = 4;
  lora.lora_alpha = 8;
  lora.target_modules = {"q_proj", "v_proj"};
  attach_lora(*model, lora, 3);
  for (auto& [name, tensor] : lora_parameters(*model)) {
    if (name.find("lora_B") != std::string::npos) tensor.detach().normal_(0.0, 0.1, generator);
  }
  return model;
}

inline std::vector<Sample> samples() {
  return {{{5, 6, 7, 8, 9}, {-100, -100, 7, 8, 9}},
          {{10, 11, 12}, {10, 11, 12}},
          {{13, 14, 15, 16, 17, 18, 19}, {-100, 14, -100, 16, 17, 18, 19}},
          {{20, 21}, {20, 21}},
          {{30, 31, 32, 33}, {30, 31, 32, 33}}};
}

}  // namespace finetune::evaluate_test
