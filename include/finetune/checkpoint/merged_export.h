// merged_16bit / merged_4bit export: a full Hugging Face model directory with every adapter folded
// into its base weight as PEFT's merge_and_unload does (LoRA: W += B @ A * scaling, summed in fp32
// and rounded once to W's dtype; a 4-bit base is dequantized first, as Unsloth merges), saved in the model's
// dtype (bf16/fp16 on GPU; a CPU fp32 run stays fp32 rather than losing precision), sharded like
// transformers (model-0000i-of-0000N.safetensors + index above 5 GB), with config.json and the
// tokenizer / generation files copied from the base model. transformers.from_pretrained loads it.
// Written a tensor at a time (merged_tensors_to_save, save_tensors_streamed): host memory holds
// the model and one merged tensor, not a merged copy of every projection.
// With `quantize_4bit` (merged_4bit) the merged projections are quantized to NF4 with double
// quantization and written as transformers + bitsandbytes save a 4-bit model (packed weight,
// absmax, quant maps, quant_state; config.json's quantization_config), which they load.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "finetune/model/causal_lm.h"
#include "finetune/weights/tensor_io.h"

namespace finetune {

// Every tensor of the exported checkpoint under its HF name, adapters folded in: merged_parameters
// (merged_parameters.h; the merge sums in fp32 and rounds once to the model dtype), with a MoE
// model's router and expert stacks renamed and split per expert as the checkpoint stores them
// (Note [Expert tensors]) and, with `quantize_4bit`, the projections re-quantized to NF4 with their
// statistics under transformers' names. A merge is made (on the model's device) when its tensor's
// values are asked for, so a writer going through them holds one merged tensor at a time; with
// `quantize_4bit` the projections are merged and quantized here (the quant_state's size depends on
// the values).
std::vector<TensorToSave> merged_tensors_to_save(const CausalLM& model, bool quantize_4bit);

void export_merged(const CausalLM& model, const std::string& base_model_dir, const std::string& out_dir,
                   bool quantize_4bit);

}  // namespace finetune
