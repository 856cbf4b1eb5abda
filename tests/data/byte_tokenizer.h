// Test-only tokenizer for the data module's tests: one id per byte (0..255), and each registered
// special token string is recognised as one id (256, 257, ...). With add_bos, encode(...,
// add_special_tokens=true) prepends BOS, like Llama's post-processor. Decoding inverts encoding
// exactly, so tests can compare token streams as text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune/tokenizer/tokenizer.h"

namespace finetune {
namespace data_test {

class ByteTokenizer : public Tokenizer {
 public:
  ByteTokenizer(std::vector<std::string> specials, std::string bos, std::string eos, bool add_bos)
      : specials_(std::move(specials)), add_bos_(add_bos) {
    if (!bos.empty()) {
      special_.bos_token = bos;
      special_.bos_token_id = *token_to_id(bos);
    }
    if (!eos.empty()) {
      special_.eos_token = eos;
      special_.eos_token_id = *token_to_id(eos);
    }
  }

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens && add_bos_) ids.push_back(*special_.bos_token_id);
    size_t pos = 0;
    while (pos < text.size()) {
      bool matched = false;
      for (size_t s = 0; s < specials_.size() && !matched; ++s) {
        if (text.compare(pos, specials_[s].size(), specials_[s]) == 0) {
          ids.push_back(static_cast<int32_t>(256 + s));
          pos += specials_[s].size();
          matched = true;
        }
      }
      if (!matched) ids.push_back(static_cast<unsigned char>(text[pos++]));
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string text;
    for (int32_t id : ids) {
      if (id < 256) {
        text += static_cast<char>(id);
      } else if (!skip_special_tokens) {
        text += specials_.at(static_cast<size_t>(id - 256));
      }
    }
    return text;
  }

  std::optional<int32_t> token_to_id(const std::string& token) const override {
    for (size_t s = 0; s < specials_.size(); ++s) {
      if (specials_[s] == token) return static_cast<int32_t>(256 + s);
    }
    if (token.size() == 1) return static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }

  int64_t vocab_size() const override { return 256 + static_cast<int64_t>(specials_.size()); }

 private:
  std::vector<std::string> specials_;
  bool add_bos_;
};

// Tokenizers shaped like the model families' (special strings, BOS behaviour).
inline ByteTokenizer qwen_like_tokenizer() {
  return ByteTokenizer({"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, "", "<|im_end|>", false);
}
inline ByteTokenizer llama3_like_tokenizer() {
  return ByteTokenizer({"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                        "<|eot_id|>"},
                       "<|begin_of_text|>", "<|eot_id|>", true);
}
inline ByteTokenizer mistral_like_tokenizer() {
  return ByteTokenizer({"<unk>", "<s>", "</s>"}, "<s>", "</s>", true);
}

}  // namespace data_test
}  // namespace finetune
