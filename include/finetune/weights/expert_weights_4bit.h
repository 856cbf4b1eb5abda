// The expert stacks of a 4-bit mixture-of-experts model (Note [4-bit expert stacks] in
// model/moe_block.h), loaded one checkpoint tensor at a time so no stack exists in 16-bit:
// - from a 16-bit checkpoint (--load_in_4bit): each per-expert tensor (Qwen3-MoE's
//   mlp.experts.N.gate_proj/up_proj/down_proj, Mixtral's block_sparse_moe.experts.N.w1/w3/w2) is
//   read, converted to the model dtype on the model's device and quantized there on its own, as
//   bitsandbytes' quantize_4bit(W, blocksize=64, compress_statistics=True, quant_type="nf4")
//   quantizes the weight of an expert's nn.Linear (transformers 4.x's per-expert modules);
// - from a checkpoint saved in 4-bit: per-expert tensors stored 4-bit (the hub's *-bnb-4bit MoE
//   repos) are read as stored; experts the checkpoint keeps in 16-bit (transformers 5 quantizes
//   nn.Linear layers only, not its fused expert parameters) stay 16-bit, as transformers keeps them.
#pragma once

#include <set>
#include <string>

#include "finetune/io/safetensors.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

// Loads every expert stack of `model` (built with projections_4bit); adds the checkpoint tensors
// it consumed to `consumed`.
void load_expert_stacks_4bit(CausalLM& model, const CheckpointFiles& files, std::set<std::string>& consumed);

}  // namespace finetune
