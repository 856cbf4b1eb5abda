// BPE from tokenizer.json: byte-level (Llama-3, Qwen2, Qwen3, Phi-4) and sentencepiece-style with
// byte fallback (Llama-2, Mistral-7B, TinyLlama, Phi-3, Gemma). The pipeline is tokenizers':
// added tokens split out of the raw text -> normalizer (normalizer.h) -> added tokens flagged
// `normalized` split out of the normalized text -> pre-tokenizer (pre_tokenizer.h) -> BPE model
// (bpe_model.h) -> post-processor (TemplateProcessing / ByteLevel / none), and decoding through
// the decoder (token_decoder.h). Where transformers' tokenizer class replaces the file's pipeline
// (tokenizer_class.h), that class's pipeline is built instead. Anything else in tokenizer.json
// (WordPiece, Unigram, ...) is refused with an Error naming the file and the field.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "finetune/tokenizer/added_vocabulary.h"
#include "finetune/tokenizer/bpe_model.h"
#include "finetune/tokenizer/normalizer.h"
#include "finetune/tokenizer/pre_tokenizer.h"
#include "finetune/tokenizer/token_decoder.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/tokenizer/tokenizer_class.h"
#include "finetune/tokenizer/tokenizer_config.h"

namespace finetune {

class BpeTokenizer : public Tokenizer {
 public:
  BpeTokenizer(const std::string& tokenizer_json_path, const TokenizerConfig& config);
  // `json`: the already parsed content of `tokenizer_json_path` (used in error messages);
  // `pipeline`: whose normalizer / pre-tokenizer / decoder to run (transformers_pipeline()).
  BpeTokenizer(const std::string& tokenizer_json_path, const nlohmann::json& json, const TokenizerConfig& config,
               TokenizerPipeline pipeline = TokenizerPipeline::kFile);

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::optional<int32_t> token_to_id(const std::string& token) const override;
  int64_t vocab_size() const override;

 private:
  void parse_model(const nlohmann::json& model, const TokenizerConfig& config, TokenizerPipeline pipeline);
  void add_file_added_tokens(const nlohmann::json& json);
  void add_config_added_tokens(const TokenizerConfig& config, bool named_special_tokens);
  void parse_pipeline(const nlohmann::json& json, const TokenizerConfig& config, TokenizerPipeline pipeline);
  void parse_post_processor(const nlohmann::json& post_processor, const std::string& where);
  void encode_plain(const std::string& normalized, bool at_text_start, std::vector<int32_t>& out) const;

  std::string path_;
  std::unique_ptr<BpeModel> model_;
  // Base vocabulary by id (a map: ids come from the file, and a huge one must not allocate);
  // added tokens live in added_.
  std::unordered_map<int32_t, std::string> id_to_token_;
  AddedVocabulary added_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  TokenDecoder decoder_;
  bool clean_up_tokenization_spaces_ = false;
  std::vector<int32_t> prefix_ids_;  // post-processor: ids around the sequence
  std::vector<int32_t> suffix_ids_;
  int64_t vocab_size_ = 0;
};

}  // namespace finetune
