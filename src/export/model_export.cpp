#include "finetune/export/model_export.h"

#include "finetune/checkpoint/adapter_io.h"
#include "finetune/checkpoint/merged_export.h"
#include "finetune/checkpoint/save_methods.h"
#include "finetune/gguf/gguf_export.h"

namespace finetune {

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
  }
  if (config.save_method != SaveMethod::Gguf && !config.save_gguf) return {};
  at::NoGradGuard no_grad;
  return export_gguf_files(model.config(), merged_named_tensors(model, /*quantize_4bit=*/false), base_model_dir,
                           config.base_model_name, config.save_path, config.quantization);
}

}  // namespace finetune
