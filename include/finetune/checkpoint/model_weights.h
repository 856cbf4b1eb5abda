// Loading HF safetensors weights into a CausalLM: every expected tensor must be present with the
// model's shape (errors name the file and the tensor); unexpected tensors are an error too,
// except known non-parameter buffers (rotary inv_freq). Tensors are converted to the model dtype
// and copied straight onto its device.
#pragma once

#include <string>

#include "finetune/model/causal_lm.h"

namespace finetune {

void load_weights(CausalLM& model, const std::string& model_dir);

}  // namespace finetune
