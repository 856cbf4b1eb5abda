// The --save_method values that the end of training can write, and the known ones it cannot yet:
// one list for the export dispatch (model_export.cpp), the option parser and its help.
// Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace finetune {

inline const std::vector<std::string>& supported_save_methods() {
  static const std::vector<std::string> methods = {"lora", "merged_16bit", "merged_4bit", "gguf"};
  return methods;
}

// Other spellings of a supported method (Unsloth's merged_4bit_forced writes the same 4-bit model).
inline const std::vector<std::pair<std::string, std::string>>& save_method_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {{"merged_4bit_forced", "merged_4bit"}};
  return aliases;
}

// Unsloth CLI spellings we recognise but do not implement, with the reason (a clearer error than
// "unknown value"); any other "gguf*" spelling is refused with kGgufSaveMethodReason.
inline const std::vector<std::pair<std::string, std::string>>& unsupported_save_methods() {
  static const std::vector<std::pair<std::string, std::string>> methods = {};
  return methods;
}
inline constexpr const char* kGgufSaveMethodPrefix = "gguf";
inline constexpr const char* kGgufSaveMethodReason = "write GGUF with --save_method gguf --quantization TYPE";

}  // namespace finetune
