#include "finetune/util/json_fields.h"

#include <limits>

#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

std::string field_name(const std::string& key, const std::string& where) {
  return where == "<root>" ? key : where + "." + key;
}

}  // namespace

const nlohmann::json* json_field(const nlohmann::json& obj, const std::string& key, const std::string& path,
                                 const std::string& where) {
  if (!obj.is_object()) throw Error(path + ": field '" + where + "' must be a JSON object");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool json_bool(const nlohmann::json& obj, const std::string& key, bool fallback, const std::string& path,
               const std::string& where) {
  const nlohmann::json* value = json_field(obj, key, path, where);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) {
    throw Error(path + ": field '" + field_name(key, where) + "' must be true or false, got " + json_excerpt(*value));
  }
  return value->get<bool>();
}

std::string json_string(const nlohmann::json& obj, const std::string& key, const std::string& fallback,
                        const std::string& path, const std::string& where) {
  const nlohmann::json* value = json_field(obj, key, path, where);
  if (value == nullptr) return fallback;
  if (!value->is_string()) {
    throw Error(path + ": field '" + field_name(key, where) + "' must be a string, got " + json_excerpt(*value));
  }
  return value->get<std::string>();
}

int32_t json_token_id(const nlohmann::json& value, const std::string& path, const std::string& field) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const bool in_range = value.is_number_unsigned() ? value.get<uint64_t>() <= static_cast<uint64_t>(kMax)
                        : value.is_number_integer() ? value.get<int64_t>() >= 0 && value.get<int64_t>() <= kMax
                                                    : false;
  if (!in_range) {
    throw Error(path + ": field '" + field + "' must be a token id (an integer from 0 to " + std::to_string(kMax) +
                "), got " + json_excerpt(value));
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace finetune
