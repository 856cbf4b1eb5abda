// The general.* and <arch>.* keys of a GGUF model file, in the order llama.cpp's
// convert_hf_to_gguf.py writes them for each architecture (its writer keeps a key where it was
// first added, even when a later call sets it again):
//  - llama / qwen2 / qwen3: TextModel.set_gguf_parameters (+ LlamaModel's vocab_size and rope
//    dimension count); for Mixtral (llama) and qwen3moe also TextModel's expert_count and
//    expert_used_count, and for qwen3moe Qwen2MoeModel's expert_feed_forward_length
//    (moe_intermediate_size);
//  - phi3 (Phi3MiniModel): its own list: context length, the longrope original context, rope
//    dimension count int(partial_rotary_factor * hidden) / heads, sliding_window (0 when null);
//    and, when longrope factors exist, rope.scaling.attn_factor, which its generate_extra_tensors
//    adds before any other key but general.architecture;
//  - gemma2 (Gemma2Model): its own list with key/value length, the two soft-caps, sliding_window;
//  - gemma3 (Gemma3Model): TextModel's list (rope scaling of the full-attention layers,
//    rope.freq_base_swa of the sliding ones) with Gemma-3's defaults over it, the final soft-cap
//    when set, sliding_window unless sliding_window_pattern is 1.
// The converter reads config.json's keys as they are (a Gemma3ForConditionalGeneration's
// text_config lifted to the top), so these read ModelConfig::raw the same way.
#pragma once

#include <optional>
#include <string>

#include "finetune/gguf/gguf_file_writer.h"
#include "finetune/gguf/gguf_quantize.h"
#include "finetune/io/model_config.h"

namespace finetune {

// Adds the keys up to general.quantization_version. `type` empty: a file for llama-quantize's
// mixes, without general.file_type and general.quantization_version (the quantizer appends them).
void add_gguf_model_keys(GgufFileWriter& writer, const ModelConfig& config, const std::string& arch,
                         const std::string& model_name, std::optional<GgmlType> type);

// The converter's hparams: config.json with a text_config's keys lifted over the top-level ones.
nlohmann::json gguf_converter_hparams(const ModelConfig& config);

// Error naming `source` when llama.cpp would run a GGUF of this model differently from the model
// finetune trains (and the converter writes no key that could say otherwise): an untied Gemma-2
// lm_head (llama.cpp's gemma2 reads no output tensor), a Gemma attention scale other than llama.cpp's
// (head_dim^-0.5, or (hidden / heads)^-0.5 for the 27B shapes), Gemma's sliding layers elsewhere
// than llama.cpp's fixed pattern (Gemma-2 every other layer from 0; Gemma-3 all but every 6th); a
// MoE config with dense layers (Qwen3-MoE's mlp_only_layers, decoder_sparse_step > 1), top-k
// weights left unnormalised (norm_topk_prob false) or a sliding window (Mixtral): llama.cpp's
// qwen3moe and llama builders run experts in every layer, renormalise, and attend to every position.
void check_gguf_model_representable(const ModelConfig& config, const std::string& arch, const std::string& source);

}  // namespace finetune
