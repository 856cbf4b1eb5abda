// The --save_method values, one table for the option parser, its help, the commands' dispatch
// (SaveMethod) and the export (model_export.cpp). Header-only and LibTorch-free, so the option
// parser can use it.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace finetune {

enum class SaveMethod { Lora, Merged16bit, Merged4bit, Gguf, GgufLora };

struct SaveMethodName {
  SaveMethod method;
  const char* name;
};

// Every method the end of training (and `finetune export`, all but lora) can write.
inline const std::vector<SaveMethodName>& save_method_table() {
  static const std::vector<SaveMethodName> table = {{SaveMethod::Lora, "lora"},
                                                    {SaveMethod::Merged16bit, "merged_16bit"},
                                                    {SaveMethod::Merged4bit, "merged_4bit"},
                                                    {SaveMethod::Gguf, "gguf"},
                                                    {SaveMethod::GgufLora, "gguf_lora"}};  // the adapter as GGUF
  return table;
}

inline std::vector<std::string> supported_save_methods() {
  std::vector<std::string> names;
  for (const auto& entry : save_method_table()) names.emplace_back(entry.name);
  return names;
}

inline const char* save_method_name(SaveMethod method) {
  for (const auto& entry : save_method_table())
    if (entry.method == method) return entry.name;
  throw std::logic_error("save_method_name: a SaveMethod missing from save_method_table()");
}

// A name of supported_save_methods() (the parser has already resolved aliases); std::invalid_argument otherwise.
inline SaveMethod save_method_from_name(const std::string& name) {
  for (const auto& entry : save_method_table())
    if (name == entry.name) return entry.method;
  throw std::invalid_argument("unknown save method \"" + name + "\"");
}

// Other spellings of a method (Unsloth's merged_4bit_forced writes the same 4-bit model).
inline const std::vector<std::pair<std::string, std::string>>& save_method_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {{"merged_4bit_forced", "merged_4bit"}};
  return aliases;
}

// Any other "gguf*" spelling (Unsloth's gguf_q4_k_m ...) is refused with this reason.
inline constexpr const char* kGgufSaveMethodPrefix = "gguf";
inline constexpr const char* kGgufSaveMethodReason = "write GGUF with --save_method gguf --quantization TYPE";

}  // namespace finetune
