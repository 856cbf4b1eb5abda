#include "finetune/lora/lora_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "finetune/model/tensor_io.h"
#include "finetune/util/atomic_file.h"
#include "finetune/util/output_directory.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

const std::string kPeftPrefix = "base_model.model.";

std::string leaf_name(const std::string& module_name) {
  return module_name.substr(module_name.rfind('.') + 1);
}

}  // namespace

NamedTensors attach_lora(CausalLM& model, const LoraConfig& config, uint64_t random_state) {
  const std::set<std::string> targets(config.target_modules.begin(), config.target_modules.end());
  std::set<std::string> matched;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(random_state);
  const auto fp32_cpu = at::TensorOptions().dtype(at::kFloat);
  const double scaling = lora_scaling(config);
  for (auto& [name, linear] : model.named_linears()) {
    const auto leaf = leaf_name(name);
    if (targets.count(leaf) == 0) continue;
    matched.insert(leaf);
    auto adapter = std::make_unique<LoraAdapter>();
    // kaiming_uniform_(a=sqrt(5)) on (r, in): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in) = 1/sqrt(fan_in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(linear->in_features()));
    auto lora_A = at::empty({config.r, linear->in_features()}, fp32_cpu);
    lora_A.uniform_(-bound, bound, generator);
    adapter->lora_A = lora_A.to(model.device()).requires_grad_(true);
    adapter->lora_B = at::zeros({linear->out_features(), config.r}, fp32_cpu.device(model.device())).requires_grad_(true);
    adapter->scaling = scaling;
    adapter->dropout = config.lora_dropout;
    linear->lora = std::move(adapter);
  }
  for (const auto& target : targets) {
    if (matched.count(target) == 0) {
      throw UsageError("--target_modules: '" + target + "' matches no linear layer of " + model.config().architecture +
                       " (valid: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
    }
  }
  return lora_parameters(model);
}

NamedTensors lora_parameters(CausalLM& model) {
  NamedTensors out;
  for (auto& [name, linear] : model.named_linears()) {
    if (!linear->lora) continue;
    out.emplace_back(kPeftPrefix + name + ".lora_A.weight", linear->lora->lora_A);
    out.emplace_back(kPeftPrefix + name + ".lora_B.weight", linear->lora->lora_B);
  }
  return out;
}

LoraConfig read_adapter_config(const std::string& adapter_dir) {
  const std::string path = adapter_dir + "/adapter_config.json";
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open (is " + adapter_dir + " a PEFT adapter directory?)");
  nlohmann::json json;
  try {
    in >> json;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
  return lora_config_from_adapter_json(json, path);
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

void save_adapter(CausalLM& model, const LoraConfig& config, const std::string& base_model_name_or_path,
                  const std::string& dir) {
  create_output_directory(dir, "adapter directory");
  save_tensors(dir + "/adapter_model.safetensors", lora_parameters(model), {{"format", "pt"}});
  write_file_atomically(dir + "/adapter_config.json",
                        adapter_config_json(config, base_model_name_or_path).dump(2) + "\n");
}

}  // namespace finetune
