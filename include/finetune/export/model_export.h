// The end-of-training export chosen by --save_method (checkpoint/save_methods.h), above the
// writers it dispatches to: the PEFT adapter alone (checkpoint/adapter_io.h), a full model with
// the adapter merged (checkpoint/merged_export.h), GGUF files (gguf/gguf_export.h) of the
// merged tensors, one merge for every --quantization type, or the adapter alone as GGUF
// (gguf/gguf_lora_export.h); with --save_gguf the GGUF files come after a non-GGUF method.
#pragma once

#include <string>
#include <vector>

#include "finetune/checkpoint/save_methods.h"
#include "finetune/lora/lora_config.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

struct ExportConfig {
  SaveMethod save_method = SaveMethod::Lora;
  std::string save_path;
  std::string base_model_name;       // recorded in adapter_config.json; names the GGUF files
  std::vector<std::string> quantization = {"q8_0"};  // GGUF types (gguf/quantization_names.h), one file each
  bool save_gguf = false;            // GGUF files as well as save_method's output
  std::string push_gguf;             // hub repo ORG/NAME the GGUF files are uploaded to ("" = none)
  bool hub_private_repo = false;     // create the push_gguf repo private
};

// Writes the model as `config` says into config.save_path; `base_model_dir` is where the base
// model's config and tokenizer files are copied from. Returns the GGUF files written (none unless
// save_method is gguf or gguf_lora, or save_gguf is set); a model GGUF gets an Ollama Modelfile
// beside it (export/ollama_modelfile.h) for the first of them.
std::vector<std::string> export_model(const CausalLM& model, const LoraConfig& lora, const ExportConfig& config,
                                      const std::string& base_model_dir);

}  // namespace finetune
