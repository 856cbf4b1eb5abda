// tokenizer.json's normalizer (tokenizers' normalizers): the steps this project meets in causal-LM
// tokenizers, applied in order to the text between added tokens.
//   NFC                      Qwen2 / Qwen3
//   Prepend(prepend)         Llama-2 / Mistral-7B-v0.1 / TinyLlama / Phi-3 legacy layout ("▁")
//   Replace(String, content) the same layouts and Gemma (" " -> "▁")
//   Sequence                 any of the above in order
// Anything else is refused with an Error naming the file and the field.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace finetune {

class Normalizer {
 public:
  Normalizer() = default;
  // `node`: the "normalizer" object of tokenizer.json; `where` its field path for errors.
  static Normalizer from_json(const nlohmann::json& node, const std::string& path, const std::string& where);
  // Replace(pattern, content): what GemmaTokenizer installs (" " -> "▁").
  static Normalizer replace(const std::string& pattern, const std::string& content);

  // The normalized text. Prepend adds nothing to an empty text, as in tokenizers.
  std::string apply(const std::string& text) const;
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    enum class Kind { kNfc, kPrepend, kReplace } kind;
    std::string pattern;  // Prepend: the prefix; Replace: the searched string
    std::string content;  // Replace: the replacement
  };
  void append_from_json(const nlohmann::json& node, const std::string& path, const std::string& where);

  std::vector<Step> steps_;
};

}  // namespace finetune
