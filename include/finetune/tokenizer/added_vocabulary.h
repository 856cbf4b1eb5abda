// Added tokens (tokenizers' AddedVocabulary): special tokens such as <|eot_id|> and non-special ones
// such as <think>. They are cut out of the text before normalization and pre-tokenization, so a
// special token written in the text becomes its single id. Matching is leftmost-longest, and the
// lstrip / rstrip / single_word flags behave as in tokenizers.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace finetune {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // matched against the normalized text instead of the raw text
};

// One added-token entry as tokenizer.json's added_tokens and tokenizer_config.json's
// added_tokens_decoder write it ({"content", "special", "lstrip", "rstrip", "single_word",
// "normalized"}; `normalized` defaults to !special), with the id given by the caller. Throws
// nlohmann's exception on a missing or mistyped field (the caller names file and field).
AddedToken added_token_from_json(const nlohmann::json& entry, int32_t id);

// A piece of input: either plain text (added_id < 0) or one added token.
struct AddedTokenSplit {
  std::string text;
  int32_t added_id = -1;
};

class AddedVocabulary {
 public:
  void add(const AddedToken& token);

  // Splits `text` on the tokens whose `normalized` flag equals `normalized`.
  std::vector<AddedTokenSplit> split(const std::string& text, bool normalized) const;

  const AddedToken* find_by_id(int32_t id) const;
  const AddedToken* find_by_content(const std::string& content) const;
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool has_normalized_tokens() const;

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_by_id_;
  std::unordered_map<std::string, size_t> index_by_content_;
  std::array<bool, 256> is_first_byte_{};  // quick rejection of positions no token can start at
};

}  // namespace finetune
