#include "finetune/export/model_export.h"

#include <filesystem>

#include "finetune/checkpoint/adapter_io.h"
#include "finetune/checkpoint/merged_export.h"
#include "finetune/checkpoint/merged_parameters.h"
#include "finetune/checkpoint/save_methods.h"
#include "finetune/export/ollama_modelfile.h"
#include "finetune/gguf/gguf_export.h"
#include "finetune/gguf/gguf_lora_export.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// merged_parameters as the GGUF export reads them, each merged only when the export asks for it
// (Note [Streamed GGUF export]).
GgufTensorSource merged_tensor_source(const CausalLM& model) {
  GgufTensorSource source;
  for (auto& parameter : merged_parameters(model)) {
    source.push_back({std::move(parameter.name), std::move(parameter.shape), std::move(parameter.values)});
  }
  return source;
}

// Every adapted projection's LoRA matrices under its base weight's name.
std::vector<GgufLoraProjection> lora_projections(const CausalLM& model) {
  std::vector<GgufLoraProjection> projections;
  for (const auto& [name, linear] : model.named_linears()) {
    if (!linear->adapter) continue;
    GgufLoraProjection projection{name + ".weight", {}, {}};
    for (const auto& [parameter, tensor] : linear->adapter->named_parameters()) {
      if (parameter == "lora_A.weight") projection.lora_A = tensor;
      if (parameter == "lora_B.weight") projection.lora_B = tensor;
    }
    if (!projection.lora_A.defined() || !projection.lora_B.defined()) {
      throw Error("GGUF LoRA export: " + name + ": the adapter has no lora_A / lora_B weights");
    }
    projections.push_back(std::move(projection));
  }
  return projections;
}

}  // namespace

std::vector<std::string> export_model(const CausalLM& model, const LoraConfig& lora, const ExportConfig& config,
                                      const std::string& base_model_dir) {
  switch (config.save_method) {
    case SaveMethod::Lora:
      save_adapter(model, lora, config.base_model_name, config.save_path);
      break;
    case SaveMethod::Merged16bit:
    case SaveMethod::Merged4bit:
      export_merged(model, base_model_dir, config.save_path, config.save_method == SaveMethod::Merged4bit);
      break;
    case SaveMethod::Gguf:
      break;
    case SaveMethod::GgufLora:
      // llama.cpp's LoRA GGUF holds lora_a/lora_b pairs only: trained biases or modules would be dropped.
      if (lora.bias != "none" || !lora.modules_to_save.empty()) {
        throw UsageError("--save_method gguf_lora: the adapter trains biases or whole modules (bias " + lora.bias +
                         ", modules_to_save " + join(lora.modules_to_save, ",") + "), which a GGUF LoRA adapter "
                         "cannot carry; export merged (merged_16bit or gguf) instead");
      }
      return export_gguf_lora(model.config(), lora, lora_projections(model), base_model_dir, config.base_model_name,
                              config.save_path, config.quantization);
  }
  if (config.save_method != SaveMethod::Gguf && !config.save_gguf) return {};
  at::NoGradGuard no_grad;
  auto files = export_gguf_files(model.config(), merged_tensor_source(model), base_model_dir, config.base_model_name,
                                 config.save_path, config.quantization);
  write_ollama_modelfile(base_model_dir, config.save_path, std::filesystem::path(files.front()).filename().string());
  return files;
}

}  // namespace finetune
