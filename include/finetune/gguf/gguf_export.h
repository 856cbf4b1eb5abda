// --save_method gguf: the model's tensors with its adapters merged (the caller merges them once:
// export/model_export.h) written as one GGUF v3 file per --quantization type, with the metadata,
// tensor names, types and bytes that llama.cpp's convert_hf_to_gguf.py writes for the
// merged_16bit directory of the same model (LlamaModel / Qwen2Model / Qwen3Model): 1-D tensors and
// norms F32, the rest in the chosen type (Q8_0 rows that are not a multiple of 32 fall back to F16, as the converter does),
// or for q4_0/q5_0/q6_k/q4_k_m/q5_k_m the file llama-quantize makes of the F16 one (export_gguf_quantized),
// Llama's q/k rows permuted, rope_freqs for Llama-3 rope scaling. general.name is the model
// directory's name (the converter's title-cased guess and its size label are not reproduced).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/gguf/gguf_quant_mix.h"
#include "finetune/gguf/gguf_quantize.h"
#include "finetune/model/named_tensors.h"

namespace finetune {

// SAVE_PATH/<model name>.<TYPE>.gguf, e.g. out/Llama-3.2-1B.Q8_0.gguf (`model_name` may be a hub id
// or a path; its last component is used).
std::string gguf_file_path(const std::string& save_path, const std::string& model_name, GgmlType type);
// The same with the type part spelled out ("Q4_K_M").
std::string gguf_file_path(const std::string& save_path, const std::string& model_name, const std::string& label);

// Writes `out_path` atomically from `tensors` (the model's weights with adapters merged, HF
// names). `base_model_dir` holds config.json and the tokenizer files.
void export_gguf(const ModelConfig& config, NamedTensors tensors, const std::string& base_model_dir,
                 const std::string& model_name, const std::string& out_path, GgmlType type);

// The file llama.cpp's llama_model_quantize writes for `mix` (no importance matrix) from the F16
// file export_gguf writes for the same tensors (gguf_quant_mix.h): its KV pairs with
// general.quantization_version and general.file_type moved to the end, the tensors in the
// quantizer's order and types, quantized from their F16 values.
void export_gguf_quantized(const ModelConfig& config, NamedTensors tensors, const std::string& base_model_dir,
                           const std::string& model_name, const std::string& out_path, const GgufQuantMix& mix);

// One file per entry of `quantizations` (gguf/quantization_names.h spellings) into `save_path`,
// all from the same `tensors`; returns the paths written.
std::vector<std::string> export_gguf_files(const ModelConfig& config, NamedTensors tensors,
                                           const std::string& base_model_dir, const std::string& model_name,
                                           const std::string& save_path, const std::vector<std::string>& quantizations);

}  // namespace finetune
