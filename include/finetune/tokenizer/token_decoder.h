// tokenizer.json's decoder (tokenizers' decoders): turns the tokens of decode() back into text.
// Each step rewrites the list of token strings, as tokenizers' decode_chain does, and the result is
// their concatenation; with no decoder the tokens are joined with spaces.
//   ByteLevel                     byte-level BPE: tokens -> bytes -> lossy UTF-8
//   Replace(String, content)      "▁" -> " " in the sentencepiece-style layouts
//   ByteFallback                  runs of <0xNN> tokens -> their bytes, or one U+FFFD per byte when
//                                 the run is not valid UTF-8
//   Fuse                          all tokens -> one
//   Strip(content, start, stop)   up to start / stop copies of `content` off each token's ends
//   Metaspace(replacement, prepend_scheme)  "▁" -> " ", dropped in the first token unless "never"
//   Sequence                      the above in order
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/tokenizer/byte_level.h"

namespace finetune {

// "<0x41>" -> 0x41 as ByteFallback recognises byte tokens; -1 for any other token.
int byte_fallback_value(const std::string& token);

class TokenDecoder {
 public:
  // No decoder: tokens joined with spaces.
  TokenDecoder() = default;
  // `node`: the "decoder" object of tokenizer.json; `where` its field path for errors.
  static TokenDecoder from_json(const nlohmann::json& node, const std::string& path, const std::string& where);
  // The decoders transformers' LlamaTokenizer and GemmaTokenizer install.
  static TokenDecoder llama(bool add_prefix_space);
  static TokenDecoder gemma();

  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string pattern;  // Replace: searched string; Strip: the stripped character; Metaspace: replacement
    std::string content;  // Replace: the replacement
    size_t start = 0, stop = 0;  // Strip
    bool prepend = true;         // Metaspace: prepend_scheme != "never"
  };
  void append_from_json(const nlohmann::json& node, const std::string& path, const std::string& where);
  void apply(const Step& step, std::vector<std::string>& tokens) const;

  bool present_ = false;
  std::vector<Step> steps_;
  std::shared_ptr<const ByteLevelMap> byte_level_;  // only when a ByteLevel step is present
};

}  // namespace finetune
