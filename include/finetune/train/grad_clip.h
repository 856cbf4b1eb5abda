// torch.nn.utils.clip_grad_norm_: total 2-norm over all gradients, then every gradient scaled by
// min(1, max_norm / (total + 1e-6)). Returns the pre-clip total norm (a device scalar: reading it
// is left to the logger, so no host sync happens here).
#pragma once

#include <vector>

#include <ATen/ATen.h>

namespace finetune {

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm);

}  // namespace finetune
