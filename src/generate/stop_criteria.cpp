#include "finetune/generate/stop_criteria.h"

#include <filesystem>

#include "finetune/util/json_fields.h"
#include "finetune/util/json_parse.h"

namespace finetune {

std::optional<size_t> find_stop_string(const std::string& text, const std::vector<std::string>& stop_strings) {
  std::optional<size_t> earliest;
  for (const auto& stop : stop_strings) {
    const size_t at = text.find(stop);
    if (at != std::string::npos && (!earliest || at < *earliest)) earliest = at;
  }
  return earliest;
}

std::set<int64_t> eos_token_ids(const std::string& model_dir, std::optional<int32_t> tokenizer_eos) {
  std::set<int64_t> ids;
  if (tokenizer_eos) ids.insert(*tokenizer_eos);
  // transformers' generation config comes from generation_config.json, else from config.json.
  for (const char* name : {"generation_config.json", "config.json"}) {
    const auto path = (std::filesystem::path(model_dir) / name).string();
    if (!std::filesystem::exists(path)) continue;
    const auto json = read_json_file(path);
    const auto* field = json_field(json, "eos_token_id", path, "<root>");
    if (field == nullptr) continue;
    if (field->is_array()) {
      for (size_t i = 0; i < field->size(); ++i) {
        ids.insert(json_token_id((*field)[i], path, "eos_token_id[" + std::to_string(i) + "]"));
      }
    } else {
      ids.insert(json_token_id(*field, path, "eos_token_id"));
    }
    break;
  }
  return ids;
}

}  // namespace finetune
