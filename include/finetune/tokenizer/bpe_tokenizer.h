// Byte-level BPE from tokenizer.json, as Llama-3, Qwen2 and Qwen3 ship it. The pipeline is
// tokenizers': added tokens split out of the raw text -> normalizer (none or NFC) -> pre-tokenizer
// (Split regexes, ByteLevel) -> BPE model -> post-processor (TemplateProcessing / ByteLevel / none),
// and decoding through the ByteLevel decoder. Anything else in tokenizer.json (WordPiece, Unigram,
// Metaspace, ...) is refused with an Error naming the file and the field.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "finetune/tokenizer/added_vocabulary.h"
#include "finetune/tokenizer/bpe_model.h"
#include "finetune/tokenizer/byte_level.h"
#include "finetune/tokenizer/regex_splitter.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/tokenizer/tokenizer_config.h"

namespace finetune {

class BpeTokenizer : public Tokenizer {
 public:
  BpeTokenizer(const std::string& tokenizer_json_path, const TokenizerConfig& config);
  // `json`: the already parsed content of `tokenizer_json_path` (used in error messages).
  BpeTokenizer(const std::string& tokenizer_json_path, const nlohmann::json& json, const TokenizerConfig& config);

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::optional<int32_t> token_to_id(const std::string& token) const override;
  int64_t vocab_size() const override;

 private:
  struct PreTokenizerStep {
    enum class Kind { kSplitIsolated, kSplitRemoved, kByteLevel } kind;
    std::shared_ptr<RegexSplitter> regex;  // null for ByteLevel(use_regex=false)
    bool add_prefix_space = false;
  };

  void parse_normalizer(const nlohmann::json& normalizer, const std::string& where);
  void parse_pre_tokenizer(const nlohmann::json& pre_tokenizer, const std::string& where);
  void parse_post_processor(const nlohmann::json& post_processor, const std::string& where);
  void parse_decoder(const nlohmann::json& decoder, const std::string& where);
  void encode_plain(const std::string& text, std::vector<int32_t>& out) const;

  std::string path_;
  std::unique_ptr<BpeModel> model_;
  // Base vocabulary (added tokens live in added_); a map, as ids need not be dense.
  std::unordered_map<int32_t, std::string> id_to_token_;
  AddedVocabulary added_;
  bool nfc_ = false;
  std::vector<PreTokenizerStep> pre_tokenizer_;
  ByteLevelMap byte_level_;
  bool byte_level_decoder_ = false;  // false: tokens joined with spaces (tokenizers with no decoder)
  bool clean_up_tokenization_spaces_ = false;
  std::vector<int32_t> prefix_ids_;  // post-processor: ids around the sequence
  std::vector<int32_t> suffix_ids_;
  int64_t vocab_size_ = 0;
};

}  // namespace finetune
