// SentencePiece tokenizer.model (Llama-2, Mistral, TinyLlama) through libsentencepiece, matching
// what transformers 5 builds from a bare tokenizer.model + tokenizer_config.json: `LlamaTokenizer`
// (the tokenizers-backed class; LlamaTokenizerFast is an alias). Its pipeline is
//   added tokens (control pieces, user-defined pieces, added_tokens_decoder, named special tokens)
//   -> Metaspace(replacement "▁", split=false; prepend_scheme "first" unless legacy=true ->
//      "always", add_prefix_space=false -> "never"), no normalizer
//   -> BPE with byte fallback over the sentencepiece vocabulary
//   -> TemplateProcessing from add_bos_token / add_eos_token (both default false in transformers 5)
// and decoding through Replace("▁"," "), ByteFallback, Fuse, Strip(left 1 space).
// libsentencepiece runs the BPE step: its own normalization (dummy prefix, whitespace folding,
// charsmap) is switched off in the loaded model so that it sees exactly the Metaspace output.
// Note: "first" prepends "▁" only to text at offset 0 that does not already start with a space, so
// for " hello" decode(encode(x)) drops the leading space, exactly as transformers does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "finetune/tokenizer/added_vocabulary.h"
#include "finetune/tokenizer/token_decoder.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/tokenizer/tokenizer_config.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace finetune {

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& model_path, const TokenizerConfig& config);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::optional<int32_t> token_to_id(const std::string& token) const override;
  int64_t vocab_size() const override;

 private:
  enum class PrependScheme { kFirst, kAlways, kNever };

  void encode_plain(const std::string& text, bool at_text_start, std::vector<int32_t>& out) const;

  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::vector<std::string> pieces_;
  AddedVocabulary added_;
  PrependScheme prepend_scheme_ = PrependScheme::kFirst;
  TokenDecoder decoder_;  // LlamaTokenizer's: Replace, ByteFallback, Fuse, Strip when add_prefix_space
  bool clean_up_tokenization_spaces_ = false;
  std::vector<int32_t> prefix_ids_;
  std::vector<int32_t> suffix_ids_;
  int64_t vocab_size_ = 0;
};

}  // namespace finetune
