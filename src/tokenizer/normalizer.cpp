#include "finetune/tokenizer/normalizer.h"

#include "finetune/tokenizer/unicode_nfc.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_fields.h"

namespace finetune {
namespace {

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
}

// Replace's pattern: {"String": "..."}; a {"Regex": ...} pattern is refused.
std::string string_pattern(const nlohmann::json& node, const std::string& path, const std::string& where) {
  const nlohmann::json* pattern = json_field(node, "pattern", path, where);
  if (pattern && pattern->is_object() && pattern->contains("String") && (*pattern)["String"].is_string()) {
    return (*pattern)["String"].get<std::string>();
  }
  throw Error(path + ": field '" + where + ".pattern' must be {\"String\": ...}; Regex patterns are not supported here");
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& node, const std::string& path, const std::string& where) {
  Normalizer normalizer;
  normalizer.append_from_json(node, path, where);
  return normalizer;
}

Normalizer Normalizer::replace(const std::string& pattern, const std::string& content) {
  Normalizer normalizer;
  normalizer.steps_.push_back({Step::Kind::kReplace, pattern, content});
  return normalizer;
}

void Normalizer::append_from_json(const nlohmann::json& node, const std::string& path, const std::string& where) {
  const std::string type = json_string(node, "type", "", path, where);
  if (type == "NFC") {
    steps_.push_back({Step::Kind::kNfc, "", ""});
  } else if (type == "Prepend") {
    steps_.push_back({Step::Kind::kPrepend, json_string(node, "prepend", "", path, where), ""});
  } else if (type == "Replace") {
    steps_.push_back({Step::Kind::kReplace, string_pattern(node, path, where), json_string(node, "content", "", path, where)});
  } else if (type == "Sequence") {
    const auto* list = json_field(node, "normalizers", path, where);
    if (!list || !list->is_array()) throw Error(path + ": field '" + where + ".normalizers' must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
      append_from_json((*list)[i], path, where + ".normalizers[" + std::to_string(i) + "]");
    }
  } else {
    throw Error(path + ": field '" + where + ".type' is '" + type +
                "'; supported normalizers: null, NFC, Prepend, Replace, Sequence");
  }
}

std::string Normalizer::apply(const std::string& text) const {
  std::string out = text;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kNfc:
        out = nfc_normalize(out);
        break;
      case Step::Kind::kPrepend:
        if (!out.empty()) out.insert(0, step.pattern);
        break;
      case Step::Kind::kReplace:
        replace_all(out, step.pattern, step.content);
        break;
    }
  }
  return out;
}

}  // namespace finetune
