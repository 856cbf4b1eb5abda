// Tensors under their Hugging Face names (model.layers.0.self_attn.q_proj.lora_A.weight, ...), in
// the order a producer lists them: what adapters, exports and checkpoints pass around.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

}  // namespace finetune
