// tokenizer.* keys of a GGUF file from a Hugging Face byte-level BPE tokenizer (tokenizer.json +
// tokenizer_config.json + config.json), as llama.cpp's converter writes them (_set_vocab_gpt2 ->
// get_vocab_base, gguf-py SpecialVocab): tokenizer.ggml.model "gpt2", the pre-tokenizer name,
// tokens padded to vocab_size with "[PAD<i>]", token types, merges, special token ids,
// add_bos/add_eos/add_sep, the chat template and normalizer flags.
//
// llama.cpp names the pre-tokenizer by hashing the tokenizer's output on a probe text, which only
// works for tokenizers it has seen; here the name comes from the tokenizer.json Split regex, which
// is what the name stands for: Llama-3's regex -> "llama-bpe", Qwen2's (Qwen2/Qwen2.5/Qwen3) ->
// "qwen2". Any other pre-tokenizer, a non-BPE model, or a sentencepiece-only tokenizer.model is
// an Error naming the file and field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "finetune/gguf/gguf_file_writer.h"

namespace finetune {

// The llama.cpp pre-tokenizer name for tokenizer.json's pre_tokenizer; `source` names the file.
std::string gguf_pre_tokenizer_name(const nlohmann::json& tokenizer_json, const std::string& source);

// Adds the tokenizer keys for the model in `model_dir` (vocab_size from its config.json) to `writer`.
void add_gguf_vocab(GgufFileWriter& writer, const std::string& model_dir, const nlohmann::json& config_json,
                    int64_t vocab_size);

}  // namespace finetune
