// tokenizer_config.json (+ special_tokens_map.json, + chat_template.jinja) as transformers reads
// them: the named special tokens (a string or an {"content": ...} object), add_bos_token /
// add_eos_token, the chat template, added_tokens_decoder, and the Llama options legacy /
// add_prefix_space. Missing files are fine (transformers' defaults); malformed ones are errors.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "finetune/tokenizer/added_vocabulary.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  // Used for tokenizer.model only: transformers 5 ignores both when a tokenizer.json exists.
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::optional<bool> add_prefix_space;
  bool legacy = false;  // transformers 5 LlamaTokenizer default
  bool clean_up_tokenization_spaces = false;
  // transformers' class for this tokenizer ("LlamaTokenizerFast", ...): see tokenizer_class.h.
  std::optional<std::string> tokenizer_class;
  ChatTemplates chat_templates;  // tokenizer_config.json's, unless template files replace them
  std::vector<AddedToken> added_tokens_decoder;
};

TokenizerConfig read_tokenizer_config(const std::string& model_dir);

// bos/eos/pad strings with their ids in `tokenizer`, plus the chat template. A named token missing
// from the vocabulary is an Error naming `tokenizer_path` and the field.
SpecialTokens resolve_special_tokens(const TokenizerConfig& config, const Tokenizer& tokenizer,
                                     const std::string& tokenizer_path);

}  // namespace finetune
