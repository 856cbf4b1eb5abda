#include "finetune/checkpoint/adapter_io.h"

#include <filesystem>

#include "finetune/weights/tensor_io.h"
#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/output_directory.h"

namespace finetune {

LoraConfig read_adapter_config(const std::string& adapter_dir) {
  const std::string path = adapter_dir + "/adapter_config.json";
  return lora_config_from_adapter_json(read_json_file(path, "is " + adapter_dir + " a PEFT adapter directory?"), path);
}

void load_adapter_weights(CausalLM& model, const std::string& adapter_dir) {
  const std::string path = adapter_dir + "/adapter_model.safetensors";
  if (!std::filesystem::exists(path)) throw Error(path + ": not found");
  auto tensors = load_tensors(path);
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : lora_parameters(model)) {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw Error(path + ": missing tensor '" + name + "'");
    if (!it->second.sizes().equals(parameter.sizes())) {
      throw Error(path + ": tensor '" + name + "' has shape " + shape_to_string(it->second.sizes().vec()) + ", expected " +
                  shape_to_string(parameter.sizes().vec()));
    }
    parameter.copy_(it->second);
    tensors.erase(it);
  }
  if (!tensors.empty()) throw Error(path + ": unexpected tensor '" + tensors.begin()->first + "'");
}

void save_adapter(const CausalLM& model, const LoraConfig& config, const std::string& base_model_name_or_path,
                  const std::string& dir) {
  create_output_directory(dir, "adapter directory");
  save_tensors(dir + "/adapter_model.safetensors", lora_parameters(model), {{"format", "pt"}});
  write_file_atomically(dir + "/adapter_config.json",
                        adapter_config_json(config, base_model_name_or_path).dump(2) + "\n");
}

}  // namespace finetune
