#include "finetune/tokenizer/json_file.h"

#include <fstream>
#include <sstream>

#include "finetune/util/errors.h"

namespace finetune {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed JSON: " + e.what());
  }
}

const nlohmann::json* json_field(const nlohmann::json& obj, const std::string& key, const std::string& path,
                                 const std::string& where) {
  if (!obj.is_object()) throw Error(path + ": field '" + where + "' must be a JSON object");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace finetune
