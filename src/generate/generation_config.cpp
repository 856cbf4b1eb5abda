#include "finetune/generate/generation_config.h"

#include <nlohmann/json.hpp>

#include "finetune/util/errors.h"

namespace finetune {

std::vector<std::string> parse_stop_strings(const std::string& value) {
  if (value.empty()) return {};
  if (value.front() != '[') return {value};
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(value);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("--stop: not a JSON list of strings (" + std::string(e.what()) + ")");
  }
  std::vector<std::string> out;
  for (const auto& item : list) {
    if (!item.is_string() || item.get<std::string>().empty()) {
      throw UsageError("--stop: every item of the list must be a non-empty string, got " + item.dump());
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace finetune
