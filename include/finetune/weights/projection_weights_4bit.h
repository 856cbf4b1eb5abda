// The decoder projections of a 4-bit model (CausalLM built with projections_4bit; Note [4-bit base
// weights] in model/linear.h), loaded one tensor at a time so the model never exists in 16-bit:
// - from a 16-bit checkpoint (--load_in_4bit): each weight is read, converted to the model dtype
//   on the model's device and quantized there to NF4 with double quantization, as transformers +
//   bitsandbytes do for BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
//   bnb_4bit_use_double_quant=True); the 16-bit copy is freed before the next one is read;
// - from a checkpoint transformers saved in 4-bit (config.json quantization_config, the hub's
//   *-bnb-4bit repos): the packed weight and its statistics are read as stored; a projection the
//   checkpoint keeps in 16-bit (llm_int8_skip_modules) stays dense, as transformers keeps it.
#pragma once

#include <set>
#include <string>

#include "finetune/io/safetensors.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

// Loads every projection of `model`; adds the checkpoint tensors it consumed to `consumed`.
void load_projections_4bit(CausalLM& model, const CheckpointFiles& files, std::set<std::string>& consumed);

}  // namespace finetune
