// Reading a JSON file into nlohmann::json with errors that name the file (and, for the field
// helpers, the field) instead of nlohmann's bare messages.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace finetune {

// Throws finetune::Error "<path>: cannot open" / "<path>: malformed JSON: ...".
nlohmann::json read_json_file(const std::string& path);

// obj[key] when present and not null, else nullptr; throws Error naming file and field when `obj`
// is not an object.
const nlohmann::json* json_field(const nlohmann::json& obj, const std::string& key, const std::string& path,
                                 const std::string& where);

}  // namespace finetune
