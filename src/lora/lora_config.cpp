#include "finetune/lora/lora_config.h"

#include <cmath>

#include "finetune/util/errors.h"

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
          {"modules_to_save", nullptr},
          {"peft_type", "LORA"},
          {"r", config.r},
          {"rank_pattern", nlohmann::json::object()},
          {"revision", nullptr},
          {"target_modules", config.target_modules},
          {"task_type", "CAUSAL_LM"},
          {"use_dora", false},
          {"use_rslora", config.use_rslora}};
}

namespace {

template <typename T>
T required(const nlohmann::json& json, const char* key, const std::string& source) {
  if (!json.contains(key)) throw Error(source + ": missing field '" + key + "'");
  try {
    return json.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(source + ": field '" + std::string(key) + "' has the wrong type");
  }
}

// An optional field of type T (null counts as absent); errors name the source and the field.
template <typename T>
T optional_field(const nlohmann::json& json, const char* key, T fallback, const std::string& source) {
  if (!json.contains(key) || json.at(key).is_null()) return fallback;
  try {
    return json.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(source + ": field '" + std::string(key) + "' has the wrong type (" + json.at(key).type_name() + ")");
  }
}

void require_absent_or_empty(const nlohmann::json& json, const char* key, const std::string& source) {
  if (json.contains(key) && !json.at(key).is_null() && !json.at(key).empty()) {
    throw Error(source + ": '" + std::string(key) + "' is not supported");
  }
}

}  // namespace

LoraConfig lora_config_from_adapter_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw Error(source + ": not a JSON object");
  const auto peft_type = optional_field<std::string>(json, "peft_type", "LORA", source);
  if (peft_type != "LORA") throw Error(source + ": peft_type '" + peft_type + "' is not LORA");
  LoraConfig config;
  config.r = required<int64_t>(json, "r", source);
  config.lora_alpha = required<double>(json, "lora_alpha", source);
  config.lora_dropout = optional_field<double>(json, "lora_dropout", 0.0, source);
  config.use_rslora = optional_field<bool>(json, "use_rslora", false, source);
  config.bias = optional_field<std::string>(json, "bias", "none", source);
  config.base_model_name_or_path = optional_field<std::string>(json, "base_model_name_or_path", "", source);
  if (!(config.lora_dropout >= 0 && config.lora_dropout < 1)) throw Error(source + ": field 'lora_dropout' must be in [0, 1)");
  if (!std::isfinite(config.lora_alpha) || config.lora_alpha <= 0) throw Error(source + ": field 'lora_alpha' must be > 0");
  if (config.r < 1) throw Error(source + ": field 'r' must be >= 1");
  if (config.bias != "none") throw Error(source + ": bias '" + config.bias + "' is not supported (only none)");
  if (optional_field<bool>(json, "use_dora", false, source)) throw Error(source + ": 'use_dora' is not supported");
  if (optional_field<bool>(json, "fan_in_fan_out", false, source)) {
    throw Error(source + ": 'fan_in_fan_out' is not supported");
  }
  require_absent_or_empty(json, "rank_pattern", source);
  require_absent_or_empty(json, "alpha_pattern", source);
  require_absent_or_empty(json, "modules_to_save", source);
  require_absent_or_empty(json, "layers_to_transform", source);
  const auto& targets = json.contains("target_modules") ? json.at("target_modules") : nlohmann::json();
  if (targets.is_array()) {
    for (const auto& t : targets) {
      if (!t.is_string()) throw Error(source + ": field 'target_modules' must list module names (strings)");
      config.target_modules.push_back(t.get<std::string>());
    }
  } else {
    throw Error(source + ": 'target_modules' must be a list of module names");
  }
  return config;
}

}  // namespace finetune
