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
// Returns the trainable tensors, in registration order, with their PEFT (saved) names.
NamedTensors attach_lora(CausalLM& model, const LoraConfig& config, uint64_t random_state);

// The model's adapter tensors with PEFT names (after attach_lora).
NamedTensors lora_parameters(const CausalLM& model);

}  // namespace finetune
