// Attaching LoRA (or DoRA) adapters to a CausalLM's projections (Note [Projection seam] in
// model/linear.h), and naming their tensors as PEFT does (base_model.model.<projection>.lora_A.weight,
// DoRA's ....lora_magnitude_vector), which is also how checkpoint/adapter_io.h saves and loads them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/lora/lora_config.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/named_tensors.h"

namespace finetune {

// Adds an adapter to every projection whose leaf name is in config.target_modules (error if a
// target matches nothing). Initialised as PEFT does: lora_A ~ kaiming_uniform(a=sqrt(5)) i.e.
// U(-1/sqrt(in), 1/sqrt(in)), lora_B = 0; drawn on the CPU from a generator seeded with
// `random_state`, in model order, so the init does not depend on the device. fp32, requires grad.
// With config.use_dora each is a DoraAdapter (dora_adapter.h) over that same pair, its magnitude
// initialised from the base weight. The adapters follow the model's kernel policy.
// Then the biases config.bias names and the modules config.modules_to_save names are made
// trainable (mark_trainable_biases, mark_modules_to_save).
// Returns the trainable tensors, in registration order, with their PEFT (saved) names.
NamedTensors attach_lora(CausalLM& model, const LoraConfig& config, uint64_t random_state);

// --lora_operand_cache: whether each plain LoRA adapter of `model` keeps its half-precision
// operands between forwards (LoraAdapter::cache_operands; Note [Operands split per use] in
// lora/half_precision_lora_linear.cpp). Off also drops the ones already made.
void set_lora_operand_cache(CausalLM& model, bool cache);

// PEFT's LoraConfig.bias: "none" trains no bias; "all" every bias of the model; "lora_only" the
// biases of the projections that have an adapter. The bias tensors themselves train (requires
// grad), in the model's dtype, as PEFT's do. UsageError for another value, or for "all" on a
// model with biases outside its projections.
void mark_trainable_biases(CausalLM& model, const std::string& bias);

// PEFT's modules_to_save, of which finetune trains embed_tokens (lora_config.h:
// module_to_save_refusal): the embedding itself trains, in the model's dtype; PEFT trains a copy,
// which is the same while nothing else reads the original, so a tied lm_head is a UsageError.
void mark_modules_to_save(CausalLM& model, const std::vector<std::string>& modules);

// For training: UsageError when the biases (config.bias) or modules (config.modules_to_save) cannot
// be trained here: a model dtype other than float32 (the gradient reducer and optimizer state hold
// one dtype, the adapters' float32), biases of 4-bit projections (their kernel gives them no
// gradient), or modules_to_save under gradient checkpointing (CausalLM::forward_hidden detaches
// the embedding output before the checkpointed layers).
void check_base_tensors_trainable(const CausalLM& model, const LoraConfig& config, bool gradient_checkpointing);

// The model's trainable tensors with PEFT names, in model order: the embedding when it trains
// (base_model.model.model.embed_tokens.weight, as PEFT saves modules_to_save), each projection's adapter tensors
// (....q_proj.lora_A.weight), then its bias when it trains: ....q_proj.base_layer.bias under an
// adapter, ....k_proj.bias without one (what get_peft_model_state_dict saves for bias all/lora_only).
NamedTensors lora_parameters(const CausalLM& model);

}  // namespace finetune
