// Attaching LoRA adapters to a CausalLM, and the adapter's on-disk form (PEFT layout):
//   DIR/adapter_config.json
//   DIR/adapter_model.safetensors  with keys base_model.model.<linear>.lora_A.weight / lora_B.weight
// so that peft.PeftModel.from_pretrained(base, DIR) loads what we save, and we load what PEFT saves.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/lora/lora_config.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

// The trainable tensors, in registration order, with their PEFT (saved) names.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Adds an adapter to every linear whose leaf name is in config.target_modules (error if a target
// matches nothing). Initialised as PEFT does: lora_A ~ kaiming_uniform(a=sqrt(5)) i.e.
// U(-1/sqrt(in), 1/sqrt(in)), lora_B = 0; drawn on the CPU from a generator seeded with
// `random_state`, in model order, so the init does not depend on the device. fp32, requires grad.
NamedTensors attach_lora(CausalLM& model, const LoraConfig& config, uint64_t random_state);

// The model's adapter tensors with PEFT names (after attach_lora).
NamedTensors lora_parameters(CausalLM& model);

// Overwrites attached adapters with an adapter directory's tensors; every key must match.
void load_adapter_weights(CausalLM& model, const std::string& adapter_dir);
LoraConfig read_adapter_config(const std::string& adapter_dir);

// Writes adapter_config.json + adapter_model.safetensors into `dir` (created), each atomically.
void save_adapter(CausalLM& model, const LoraConfig& config, const std::string& base_model_name_or_path,
                  const std::string& dir);

}  // namespace finetune
