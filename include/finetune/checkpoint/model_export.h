// The end-of-training export chosen by --save_method (save_methods.h): the PEFT adapter alone, or
// a full model with the adapter merged (merged_export.h).
#pragma once

#include <string>

#include "finetune/lora/lora_config.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

struct ExportConfig {
  std::string save_method = "lora";  // one of supported_save_methods()
  std::string save_path;
  std::string base_model_name;       // recorded in adapter_config.json
};

// Writes the model as `config` says into config.save_path; `base_model_dir` is where the base
// model's config and tokenizer files are copied from.
void export_model(const CausalLM& model, const LoraConfig& lora, const ExportConfig& config,
                  const std::string& base_model_dir);

}  // namespace finetune
