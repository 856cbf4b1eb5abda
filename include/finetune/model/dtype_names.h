// The --dtype spellings: one table for the option parser (choices, aliases, help) and for
// select_dtype (device_selection.h), which maps the canonical names to LibTorch types.
// Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace finetune {

// "auto" first, then HF's torch_dtype spellings.
inline const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> names = {"auto", "bfloat16", "float16", "float32"};
  return names;
}

// "none": Unsloth's CLI passes --dtype None for auto-detection (its default).
inline const std::vector<std::pair<std::string, std::string>>& dtype_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"bf16", "bfloat16"}, {"fp16", "float16"}, {"fp32", "float32"}, {"none", "auto"}};
  return aliases;
}

// The canonical name of a spelling, or nullopt when it is none of them.
inline std::optional<std::string> canonical_dtype_name(const std::string& spelling) {
  for (const auto& name : dtype_names()) {
    if (spelling == name) return name;
  }
  for (const auto& [alias, name] : dtype_aliases()) {
    if (spelling == alias) return name;
  }
  return std::nullopt;
}

}  // namespace finetune
