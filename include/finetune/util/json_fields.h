// Typed access to fields of parsed JSON files (read with read_json_file, json_parse.h), with errors
// that name the file and the field instead of nlohmann's bare type_error. `where` names the object
// holding the field: "<root>" for the top level, else its path ("model", "pretokenizers[0]", ...).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace finetune {

// obj[key] when present and not null, else nullptr; throws Error naming file and field when `obj`
// is not an object.
const nlohmann::json* json_field(const nlohmann::json& obj, const std::string& key, const std::string& path,
                                 const std::string& where);

// obj[key] when it is a boolean / a string, `fallback` when absent or null; any other type is an
// Error naming file and field.
bool json_bool(const nlohmann::json& obj, const std::string& key, bool fallback, const std::string& path,
               const std::string& where);
std::string json_string(const nlohmann::json& obj, const std::string& key, const std::string& fallback,
                        const std::string& path, const std::string& where);

// A token id: an integer in [0, 2^31 - 1]; anything else is an Error naming file and `field`.
int32_t json_token_id(const nlohmann::json& value, const std::string& path, const std::string& field);

}  // namespace finetune
