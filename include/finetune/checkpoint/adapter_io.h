// A LoRA adapter's on-disk form, PEFT's layout:
//   DIR/adapter_config.json
//   DIR/adapter_model.safetensors  with keys base_model.model.<projection>.lora_A.weight / lora_B.weight
//                                  (DoRA also <projection>.lora_magnitude_vector, no ".weight", as PEFT)
// so that peft.PeftModel.from_pretrained(base, DIR) loads what we save, and we load what PEFT saves.
#pragma once

#include <string>

#include "finetune/lora/attach_lora.h"
#include "finetune/lora/lora_config.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

// Overwrites attached adapters with an adapter directory's tensors; every key must match.
void load_adapter_weights(CausalLM& model, const std::string& adapter_dir);
LoraConfig read_adapter_config(const std::string& adapter_dir);

// Writes adapter_config.json + adapter_model.safetensors into `dir` (created), each atomically.
void save_adapter(const CausalLM& model, const LoraConfig& config, const std::string& base_model_name_or_path,
                  const std::string& dir);

}  // namespace finetune
