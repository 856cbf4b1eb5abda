// GPT-2's byte <-> printable-character map (tokenizers' ByteLevel pre-tokenizer and decoder): every
// byte becomes one visible code point, so byte-level BPE vocabularies are ordinary UTF-8 strings.
#pragma once

#include <array>
#include <optional>
#include <string>

namespace finetune {

class ByteLevelMap {
 public:
  ByteLevelMap();

  // Each byte of `bytes` -> its mapped character, UTF-8 encoded.
  std::string encode(const std::string& bytes) const;
  // Inverse for one token. A token holding any character outside the map (an added token such as
  // "<tool call>") is kept as its own UTF-8 bytes, as tokenizers' ByteLevel decoder does.
  std::string decode_token(const std::string& token) const;

 private:
  std::array<std::string, 256> byte_to_char_;
  std::array<int, 324> char_to_byte_;  // indexed by code point; all mapped code points are < 324
};

}  // namespace finetune
