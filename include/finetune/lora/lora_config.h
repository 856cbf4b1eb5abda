// LoRA hyper-parameters, named as in PEFT's LoraConfig / adapter_config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace finetune {

struct LoraConfig {
  int64_t r = 16;
  double lora_alpha = 16;
  double lora_dropout = 0.0;
  bool use_rslora = false;
  bool use_dora = false;  // DoRA (dora_adapter.h) instead of plain LoRA
  std::vector<std::string> target_modules;  // leaf module names: q_proj, k_proj, ...
  // PEFT's target_parameters: expert stacks by name or name suffix (mlp.experts.gate_up_proj),
  // lora/expert_lora_adapter.h.
  std::vector<std::string> target_parameters;
  std::vector<std::string> modules_to_save;  // PEFT's: modules trained whole and saved (embed_tokens)
  std::string bias = "none";  // PEFT's: none, all or lora_only (attach_lora.h: mark_trainable_biases)
  // Where the adapter was trained (adapter_config.json's base_model_name_or_path; "" if unknown).
  std::string base_model_name_or_path;
};

// alpha / r, or alpha / sqrt(r) with rsLoRA (PEFT's LoraLayer.update_layer).
double lora_scaling(const LoraConfig& config);

// Why `module` cannot be one of modules_to_save ("" when it can: embed_tokens). Inline: the option
// parser (LibTorch-free) reads it too.
inline std::string module_to_save_refusal(const std::string& module) {
  if (module == "embed_tokens") return "";
  if (module == "lm_head") {
    return "training lm_head is not implemented (the fused LM-head loss computes no gradient for the head weight)";
  }
  return "not a module finetune can train whole (embed_tokens)";
}

// PEFT's adapter_config.json for this config (peft_type LORA, task_type CAUSAL_LM; DoRA is LORA
// with use_dora true, as PEFT writes it).
nlohmann::json adapter_config_json(const LoraConfig& config, const std::string& base_model_name_or_path);
// Reads an adapter_config.json; unsupported settings (rank/alpha patterns, modules_to_save,
// fan_in_fan_out...) are errors naming the file and field.
LoraConfig lora_config_from_adapter_json(const nlohmann::json& json, const std::string& source);

}  // namespace finetune
