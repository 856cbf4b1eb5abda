// merged_16bit / merged_4bit export: a full Hugging Face model directory with every adapter folded
// into its base weight as PEFT's merge_and_unload does (LoRA: W += B @ A * scaling, summed in fp32
// and rounded once to W's dtype; a 4-bit base is dequantized first, as Unsloth merges), saved in the model's
// dtype (bf16/fp16 on GPU; a CPU fp32 run stays fp32 rather than losing precision), sharded like
// transformers (model-0000i-of-0000N.safetensors + index above 5 GB), with config.json and the
// tokenizer / generation files copied from the base model. transformers.from_pretrained loads it.
// With `quantize_4bit` (merged_4bit) the merged projections are quantized to NF4 with double
// quantization and written as transformers + bitsandbytes save a 4-bit model (packed weight,
// absmax, quant maps, quant_state; config.json's quantization_config), which they load.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "finetune/model/causal_lm.h"

namespace finetune {

// Every tensor of the exported checkpoint under its HF name, adapters folded in: projections
// merged (a 4-bit base dequantized first; the merge sums in fp32 and rounds once to the model
// dtype) and, with `quantize_4bit`, re-quantized to NF4 with its statistics under transformers'
// names. On the model's device; the GGUF export (gguf/gguf_export.h) reads the same tensors.
std::vector<std::pair<std::string, at::Tensor>> merged_named_tensors(const CausalLM& model, bool quantize_4bit);

void export_merged(const CausalLM& model, const std::string& base_model_dir, const std::string& out_dir,
                   bool quantize_4bit);

}  // namespace finetune
