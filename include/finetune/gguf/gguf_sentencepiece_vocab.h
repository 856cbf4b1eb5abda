// The token list of convert_hf_to_gguf.py's _create_vocab_sentencepiece for a model directory with
// a sentencepiece tokenizer.model: config.json's vocab_size entries, "[PAD<i>]" / -10000 / UNUSED
// by default; each piece of tokenizer.model (up to vocab_size) with its score and type (UNKNOWN,
// CONTROL, UNUSED, BYTE as sentencepiece marks them, every other piece NORMAL); then
// added_tokens.json entries (USER_DEFINED, score -1000) and tokenizer_config.json's
// added_tokens_decoder (CONTROL when special or special-looking, else USER_DEFINED with "▁" written
// as " "; score -1000).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace finetune {

struct GgufSentencePieceVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // gguf-py TokenType
};

GgufSentencePieceVocab read_gguf_sentencepiece_vocab(const std::string& model_dir, int64_t vocab_size);

// Phi3MiniModel.set_vocab's own list for a Phi-3 tokenizer.model: `vocab_size` slots (config.json's,
// else the model's piece count), the pieces as above, added_tokens.json, then every entry of
// tokenizer_config.json's added_tokens_decoder and of tokenizer.json's added_tokens (CONTROL when
// special, else USER_DEFINED, as written; score -1000). An Error where the converter fails: pieces
// or added token ids past vocab_size.
GgufSentencePieceVocab read_gguf_phi3_vocab(const std::string& model_dir, std::optional<int64_t> vocab_size);

}  // namespace finetune
