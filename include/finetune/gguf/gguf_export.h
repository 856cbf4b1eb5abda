// --save_method gguf: the model's tensors with its adapters merged written as one GGUF v3 file per
// --quantization type, with the metadata, tensor names, types and bytes that llama.cpp's
// convert_hf_to_gguf.py writes for the merged_16bit directory of the same model (LlamaModel /
// Qwen2Model / Qwen3Model / Qwen3MoeModel, Mixtral as LlamaModel with experts: Note [GGUF expert
// tensors] in gguf_tensor_names.h): 1-D tensors, norms and a MoE router F32, the rest in the chosen type (Q8_0 rows
// that are not a multiple of 32 fall back to F16, as the converter does), or for
// q4_0/q5_0/q6_k/q4_k_m/q5_k_m the file llama-quantize makes of the F16 one (gguf_quant_mix.h),
// Llama's q/k rows permuted, rope_freqs for Llama-3 rope scaling. general.name is the model
// directory's name (the converter's title-cased guess and its size label are not reproduced).
//
// Note [Streamed GGUF export]
// Every file's header (KV pairs, tensor infos with their offsets) is planned from the tensors'
// names and shapes alone, and written first; then each tensor is fetched once (a merged
// projection is merged when its turn comes), and encoded into every file a block of rows at a
// time, each block written at its place in each file. Host memory holds one tensor's source and
// one block of rows per file, whatever the model's size, and all --quantization types share one
// merge.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/gguf/gguf_quantize.h"

namespace finetune {

// One tensor to export under its HF name: its shape, known before its values, and how to get the
// values when its turn comes (any device, any floating dtype; called once).
struct GgufSourceTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<at::Tensor()> values;
};
using GgufTensorSource = std::vector<GgufSourceTensor>;

// general.name and the file names' stem: the last path component of `model_name` (a hub id or a
// path), "Llama-3.2-1B" for "meta-llama/Llama-3.2-1B/".
std::string gguf_model_name(const std::string& model_name);

// The converter's type for a tensor of a file of `type` (f32/f16/bf16/q8_0; ModelBase.prepare_tensors):
// F32 for 1-D tensors and norms, F16 where Q8_0 cannot hold rows of `row_length`, else `type`.
GgmlType gguf_converter_tensor_type(const std::string& gguf_name, size_t dims, int64_t row_length, GgmlType type);

// SAVE_PATH/<model name>.<TYPE>.gguf, e.g. out/Llama-3.2-1B.Q8_0.gguf (`model_name` may be a hub id
// or a path; its last component is used; `label` as llama.cpp spells the type: "Q8_0", "Q4_K_M").
std::string gguf_file_path(const std::string& save_path, const std::string& model_name, const std::string& label);

// One file per entry of `quantizations` (gguf/quantization_names.h spellings, all checked before
// anything is written) into `save_path`, all from one pass over `source` (Note [Streamed GGUF
// export]); `base_model_dir` holds config.json and the tokenizer files. Returns the paths written;
// on an error none of them is left.
std::vector<std::string> export_gguf_files(const ModelConfig& config, GgufTensorSource source,
                                           const std::string& base_model_dir, const std::string& model_name,
                                           const std::string& save_path, const std::vector<std::string>& quantizations);

}  // namespace finetune
