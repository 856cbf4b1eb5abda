#include "finetune/export/model_export.h"

#include "finetune/checkpoint/adapter_io.h"
#include "finetune/checkpoint/merged_export.h"
#include "finetune/checkpoint/save_methods.h"
#include "finetune/gguf/gguf_export.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {

std::vector<std::string> export_model(const CausalLM& model, const LoraConfig& lora, const ExportConfig& config,
                                      const std::string& base_model_dir) {
  if (config.save_method == "lora") {
    save_adapter(model, lora, config.base_model_name, config.save_path);
  } else if (config.save_method == "merged_16bit" || config.save_method == "merged_4bit") {
    export_merged(model, base_model_dir, config.save_path, config.save_method == "merged_4bit");
  } else if (config.save_method != "gguf") {
    throw UsageError("--save_method: '" + config.save_method + "' is not supported (" +
                     join(supported_save_methods(), ", ") + ")");
  }
  if (config.save_method != "gguf" && !config.save_gguf) return {};
  at::NoGradGuard no_grad;
  return export_gguf_files(model.config(), merged_named_tensors(model, /*quantize_4bit=*/false), base_model_dir,
                           config.base_model_name, config.save_path, config.quantization);
}

}  // namespace finetune
