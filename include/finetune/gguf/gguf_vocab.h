// tokenizer.* keys of a GGUF file, as llama.cpp's convert_hf_to_gguf.py writes them for the model
// directory (tokenizer.json / tokenizer.model + tokenizer_config.json + config.json):
//  - Llama / Mistral with a sentencepiece tokenizer.model (Llama-2, Mistral-7B, TinyLlama;
//    LlamaModel.set_vocab tries it first, even beside a tokenizer.json): _set_vocab_sentencepiece,
//    tokenizer.ggml.model "llama", pre "default", pieces, scores and token types
//    (gguf_sentencepiece_vocab.h), then gguf-py SpecialVocab without merges;
//  - otherwise a byte-level BPE tokenizer.json: _set_vocab_gpt2 -> get_vocab_base,
//    tokenizer.ggml.model "gpt2", the pre-tokenizer name, tokens padded to vocab_size with
//    "[PAD<i>]", token types, then SpecialVocab with merges (special token ids,
//    add_bos/add_eos/add_sep, the chat template, normalizer flags).
//
// The pre-tokenizer name (gguf_pre_tokenizer_name) is the converter's: the sha256 of the token ids
// our tokenizer gives its probe text, looked up in its table. Tokenizers it has not seen (tiny
// test vocabularies, trimmed copies) fall back to what their pre_tokenizer spells out, where that
// names one llama.cpp pre-tokenizer: a Split with Llama-3's regex -> "llama-bpe", Qwen2's ->
// "qwen2", Mistral-Nemo's -> "tekken"; a lone ByteLevel with its GPT-2 regex -> "gpt-2", Digits
// (individual) then that ByteLevel -> "smollm". Anything else is an Error naming the file, the
// hash and the pre_tokenizer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "finetune/gguf/gguf_file_writer.h"

namespace finetune {

// The llama.cpp pre-tokenizer name for the byte-level BPE tokenizer in `model_dir` (tokenizer.json).
std::string gguf_pre_tokenizer_name(const std::string& model_dir);

// The fallback above from tokenizer.json's pre_tokenizer alone; "" when it names none.
std::string gguf_pre_tokenizer_name_from_structure(const nlohmann::json& tokenizer_json);

// Adds the tokenizer keys for the model in `model_dir` (vocab_size from its config.json) to `writer`:
// per config.json's model_type, Phi3MiniModel's, Gemma2Model's / Gemma3Model's or LlamaModel's
// set_vocab (gguf_sentencepiece_vocab.h), else the byte-level BPE path above.
void add_gguf_vocab(GgufFileWriter& writer, const std::string& model_dir, const nlohmann::json& config_json,
                    int64_t vocab_size);

// Gemma3Model.modify_tensors' token_embd rows without a tokenizer.model: tokenizer.json's vocab
// plus added_tokens entries; nullopt with a tokenizer.model (its list has vocab_size entries).
std::optional<int64_t> gguf_gemma3_token_rows(const std::string& model_dir);

// Throws the Error add_gguf_vocab would throw for `model_dir` (reads its config.json), so that a
// run that ends in a GGUF export can refuse before training.
void check_gguf_vocabulary(const std::string& model_dir);

// The converter's does_token_look_special (added tokens that are control tokens though not "special").
bool gguf_token_looks_special(const std::string& token);

}  // namespace finetune
