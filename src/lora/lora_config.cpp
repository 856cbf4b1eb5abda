#include "finetune/lora/lora_config.h"

#include <cmath>
#include <limits>
#include <optional>

#include "finetune/util/errors.h"
#include "finetune/util/json_fields.h"
#include "finetune/util/json_parse.h"

namespace finetune {

double lora_scaling(const LoraConfig& config) {
  return config.use_rslora ? config.lora_alpha / std::sqrt(static_cast<double>(config.r))
                           : config.lora_alpha / static_cast<double>(config.r);
}

nlohmann::json adapter_config_json(const LoraConfig& config, const std::string& base_model_name_or_path) {
  return {{"alpha_pattern", nlohmann::json::object()},
          {"auto_mapping", nullptr},
          {"base_model_name_or_path", base_model_name_or_path},
          {"bias", config.bias},
          {"fan_in_fan_out", false},
          {"inference_mode", true},
          {"init_lora_weights", true},
          {"layers_pattern", nullptr},
          {"layers_to_transform", nullptr},
          {"lora_alpha", config.lora_alpha},
          {"lora_dropout", config.lora_dropout},
          {"modules_to_save", config.modules_to_save.empty() ? nlohmann::json() : nlohmann::json(config.modules_to_save)},
          {"peft_type", "LORA"},
          {"r", config.r},
          {"rank_pattern", nlohmann::json::object()},
          {"revision", nullptr},
          {"target_modules", config.target_modules},
          {"target_parameters", config.target_parameters.empty() ? nlohmann::json(nullptr)
                                                                  : nlohmann::json(config.target_parameters)},
          {"task_type", "CAUSAL_LM"},
          {"use_dora", config.use_dora},
          {"use_rslora", config.use_rslora}};
}

namespace {

constexpr const char* kRoot = "<root>";

// A number field (required when `fallback` is empty); a bool or string is an Error naming the field.
double number_field(const nlohmann::json& json, const char* key, const std::string& source,
                    std::optional<double> fallback = std::nullopt) {
  const nlohmann::json* value = json_field(json, key, source, kRoot);
  if (value == nullptr) {
    if (!fallback) throw Error(source + ": missing field '" + key + "'");
    return *fallback;
  }
  if (!value->is_number()) throw Error(source + ": field '" + key + "' must be a number, got " + json_excerpt(*value));
  return value->get<double>();
}

// PEFT's r: a positive integer (8.0 or 8.5 would not build nn.Linear in PEFT either).
int64_t rank_field(const nlohmann::json& json, const std::string& source) {
  const nlohmann::json* value = json_field(json, "r", source, kRoot);
  if (value == nullptr) throw Error(source + ": missing field 'r'");
  const bool positive_int64 = value->is_number_unsigned()
                                  ? value->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                                  : value->is_number_integer() && value->get<int64_t>() >= 1;
  if (!positive_int64 || value->get<int64_t>() < 1) {
    throw Error(source + ": field 'r' must be an integer >= 1, got " + json_excerpt(*value));
  }
  return value->get<int64_t>();
}

void require_absent_or_empty(const nlohmann::json& json, const char* key, const std::string& source) {
  if (json.contains(key) && !json.at(key).is_null() && !json.at(key).empty()) {
    throw Error(source + ": '" + std::string(key) + "' is not supported");
  }
}

// modules_to_save: null, absent or a list of the module names finetune trains whole.
std::vector<std::string> modules_to_save_field(const nlohmann::json& json, const std::string& source) {
  const nlohmann::json* value = json_field(json, "modules_to_save", source, kRoot);
  if (value == nullptr || value->is_null()) return {};
  if (!value->is_array()) throw Error(source + ": 'modules_to_save' must be null or a list of module names");
  std::vector<std::string> modules;
  for (const auto& module : *value) {
    const std::string name = module.is_string() ? module.get<std::string>() : module.dump();
    const std::string why = module_to_save_refusal(name);
    if (!why.empty()) throw Error(source + ": 'modules_to_save' names '" + name + "': " + why);
    modules.push_back(name);
  }
  return modules;
}

}  // namespace

LoraConfig lora_config_from_adapter_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw Error(source + ": not a JSON object");
  const std::string peft_type = json_string(json, "peft_type", "LORA", source, kRoot);
  if (peft_type != "LORA") throw Error(source + ": peft_type '" + peft_type + "' is not LORA");
  LoraConfig config;
  config.r = rank_field(json, source);
  config.lora_alpha = number_field(json, "lora_alpha", source);
  config.lora_dropout = number_field(json, "lora_dropout", source, 0.0);
  config.use_rslora = json_bool(json, "use_rslora", false, source, kRoot);
  config.use_dora = json_bool(json, "use_dora", false, source, kRoot);
  config.bias = json_string(json, "bias", "none", source, kRoot);
  config.base_model_name_or_path = json_string(json, "base_model_name_or_path", "", source, kRoot);
  if (!(config.lora_dropout >= 0 && config.lora_dropout < 1)) throw Error(source + ": field 'lora_dropout' must be in [0, 1)");
  if (!(config.lora_alpha > 0)) throw Error(source + ": field 'lora_alpha' must be > 0");
  if (config.bias != "none" && config.bias != "all" && config.bias != "lora_only") {
    throw Error(source + ": bias '" + config.bias + "' is not one of none, all, lora_only");
  }
  if (json_bool(json, "fan_in_fan_out", false, source, kRoot)) throw Error(source + ": 'fan_in_fan_out' is not supported");
  require_absent_or_empty(json, "rank_pattern", source);
  require_absent_or_empty(json, "alpha_pattern", source);
  config.modules_to_save = modules_to_save_field(json, source);
  require_absent_or_empty(json, "layers_to_transform", source);
  const nlohmann::json* targets = json_field(json, "target_modules", source, kRoot);
  if (targets == nullptr || !targets->is_array()) {
    throw Error(source + ": 'target_modules' must be a list of module names");
  }
  for (const auto& target : *targets) {
    if (!target.is_string()) {
      throw Error(source + ": 'target_modules' must be a list of module names, got " + json_excerpt(*targets));
    }
    config.target_modules.push_back(target.get<std::string>());
  }
  const nlohmann::json* parameters = json_field(json, "target_parameters", source, kRoot);
  if (parameters != nullptr && !parameters->is_null()) {
    if (!parameters->is_array()) throw Error(source + ": 'target_parameters' must be a list of parameter names");
    for (const auto& target : *parameters) {
      if (!target.is_string())
        throw Error(source + ": 'target_parameters' must be a list of parameter names, got " + json_excerpt(*parameters));
      config.target_parameters.push_back(target.get<std::string>());
    }
  }
  return config;
}

}  // namespace finetune
