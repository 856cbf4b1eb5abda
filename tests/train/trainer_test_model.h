// A tiny Llama with a LoRA adapter on the CPU, random but reproducible, and a few samples: what
// the trainer and objective tests train on.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "../model/tiny_config.h"
#include "finetune/data/sample.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"

namespace finetune::testing {

// lora_dropout > 0 makes the trainer's generators matter. Deterministic: every call (every rank)
// builds the same weights from `seed`.
inline std::unique_ptr<CausalLM> tiny_lora_model(double lora_dropout = 0.0, uint64_t seed = 7,
                                                 std::vector<std::string> targets = {"q_proj", "v_proj", "down_proj"}) {
  auto model = std::make_unique<CausalLM>(tiny_llama_config({64, 32, 48, 2, 4, 2, 8}), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
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
  lora.lora_dropout = lora_dropout;
  lora.target_modules = std::move(targets);
  attach_lora(*model, lora, 3);
  for (auto& [name, tensor] : lora_parameters(*model)) {
    if (name.find("lora_B") != std::string::npos) tensor.detach().normal_(0.0, 0.1, generator);
  }
  return model;
}

// A training forward (ForwardOptions::training set), as the trainer runs an objective.
inline ForwardOptions training_forward() {
  ForwardOptions forward;
  forward.training = true;
  return forward;
}

// One sample per length, of pseudo-random ids in [2, 62), the first third of each a prompt (not
// trained on).
inline std::vector<Sample> samples_of_lengths(const std::vector<int>& lengths) {
  std::vector<Sample> samples;
  int32_t next = 5;
  for (const int length : lengths) {
    Sample sample;
    for (int t = 0; t < length; ++t) {
      next = (next * 17 + 3) % 60 + 2;
      sample.input_ids.push_back(next);
      sample.labels.push_back(t < length / 3 ? kIgnoreIndex : next);
    }
    samples.push_back(sample);
  }
  return samples;
}

// `count` samples of 3..9 tokens.
inline std::vector<Sample> tiny_samples(int count) {
  std::vector<int> lengths;
  for (int i = 0; i < count; ++i) lengths.push_back(3 + (i * 5) % 7);
  return samples_of_lengths(lengths);
}

}  // namespace finetune::testing
