// Text <-> token ids, matching Hugging Face `tokenizers` / `transformers` exactly.
// Two implementations behind one interface:
//   BpeTokenizer           tokenizer.json with a BPE model: byte-level (Llama-3, Qwen2, Qwen3, Phi-4)
//                          or sentencepiece-style byte fallback (Llama-2, Mistral, TinyLlama, Phi-3, Gemma)
//   SentencePieceTokenizer tokenizer.model through libsentencepiece (Llama-2, Mistral, TinyLlama), for
//                          directories without a tokenizer.json
// load_tokenizer() picks one from a model directory and reads bos/eos/pad and the chat template
// from tokenizer_config.json (and special_tokens_map.json).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace finetune {

using ChatTemplates = std::map<std::string, std::string>;

struct SpecialTokens {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;
  std::optional<int32_t> pad_token_id;
  std::optional<std::string> unk_token;
  // Jinja chat templates by name ("default" is the model's own; some models add "tool_use" or
  // "rag"), as transformers loads them: see tokenizer_config.h.
  ChatTemplates chat_templates;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special_tokens: apply the post-processor (e.g. prepend BOS) as HF's encode() does.
  // Special/added tokens appearing in `text` are recognised as single tokens.
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  virtual std::optional<int32_t> token_to_id(const std::string& token) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The largest id of any token (base vocabulary or added): it must index the model's embedding.
  int32_t max_token_id() const { return max_token_id_; }

  const SpecialTokens& special_tokens() const { return special_; }

 protected:
  SpecialTokens special_;
  int32_t max_token_id_ = -1;
};

// Loads MODEL_DIR/tokenizer.json if present (as AutoTokenizer does), else MODEL_DIR/tokenizer.model;
// errors name the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir);

}  // namespace finetune
