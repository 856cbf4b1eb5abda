// --save_method gguf_lora: the LoRA adapter alone as the GGUF file llama.cpp's
// convert_lora_to_gguf.py writes for the same PEFT adapter directory (with --base the model
// directory), which llama.cpp applies on top of the base model's GGUF (llama-cli --lora, Ollama's
// ADAPTER):
//   KV general.architecture (the base's), general.type "adapter", adapter.type "lora",
//      general.name, adapter.lora.alpha (float32), general.quantization_version 2 (no file type);
//   per adapted projection blk.N.<gguf name>.weight.lora_a = lora_A (r, in) and .lora_b = lora_B
//      (out, r) as they are (GGUF shapes {in, r} and {r, out}), Llama's q/k lora_B rows permuted
//      as the base weight's rows are, in the order of the HF weight names;
//   tensor types as the converter's --outtype f32/f16/bf16/q8_0 (rows that Q8_0 cannot hold, as
//      lora_B's r-long rows usually, F16).
// llama.cpp scales the product by alpha / r; for an rsLoRA adapter (scaling alpha / sqrt(r)) the
// alpha written is lora_alpha * sqrt(r), so llama.cpp applies the trained scaling (the converter
// writes lora_alpha as it is, which would be wrong there). DoRA has no llama.cpp form: an Error.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/gguf/gguf_quantize.h"
#include "finetune/lora/lora_config.h"

namespace finetune {

// One adapted projection: its HF base weight name ("model.layers.0.self_attn.q_proj.weight") and
// its LoRA matrices (any device and floating dtype).
struct GgufLoraProjection {
  std::string weight_name;
  at::Tensor lora_A;  // (r, in)
  at::Tensor lora_B;  // (out, r)
};

// The alpha llama.cpp needs to scale by lora_scaling(lora): lora_alpha, times sqrt(r) for rsLoRA.
double gguf_lora_alpha(const LoraConfig& lora);

// SAVE_PATH/<model name>.LoRA-<TYPE>.gguf, e.g. out/Llama-3.2-1B.LoRA-F16.gguf.
std::string gguf_lora_file_path(const std::string& save_path, const std::string& model_name, GgmlType type);

// Writes one adapter file per entry of `quantizations` (f32, f16, bf16 or q8_0: the converter's
// --outtype choices; a UsageError for the others, before anything is written) into `save_path`;
// returns the paths. `base_model_dir` holds the base's config.json.
std::vector<std::string> export_gguf_lora(const ModelConfig& config, const LoraConfig& lora,
                                          std::vector<GgufLoraProjection> projections,
                                          const std::string& base_model_dir, const std::string& model_name,
                                          const std::string& save_path, const std::vector<std::string>& quantizations);

}  // namespace finetune
