// The GGUF tensor types `--quantization` accepts (gguf/gguf_export.h writes them), with Unsloth
// CLI's other spellings. Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace finetune {

inline const std::vector<std::string>& gguf_quantization_names() {
  static const std::vector<std::string> names = {"f32", "f16", "bf16", "q8_0", "q4_0", "q5_0",
                                                    "q6_k", "q4_k_m", "q5_k_m"};
  return names;
}

// Unsloth's save_pretrained_gguf names for the same types.
inline const std::vector<std::pair<std::string, std::string>>& gguf_quantization_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {{"not_quantized", "f16"},
                                                                           {"fast_quantized", "q8_0"},
                                                                           {"quantized", "q4_k_m"}};
  return aliases;
}

}  // namespace finetune
