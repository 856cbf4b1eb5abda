// SwiGLU, transformers' act_fn(gate) * up with SiLU, in the two layouts the MLPs produce:
//   - gate and up as two tensors (the dense MLPs, whose projections are separate modules);
//   - one packed gate_up (M, 2I), gate in the first I columns and up in the last I (the expert
//     stacks' gate_up_proj, which transformers splits with chunk(2, dim=-1)), read in place.
// Which kernel runs is the KernelPolicy's choice (fused_elementwise): the fused CUDA kernels of
// model/fused_kernels.h, else ATen's at::silu(gate) * up, the CPU reference.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "finetune/model/kernel_policy.h"

namespace finetune {

// gate, up (..., I) of one shape -> silu(gate) * up (..., I). The fused kernel takes them contiguous.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, const KernelPolicy& kernels);

// gate_up (M, 2 * width), any row stride, unit column stride -> silu(gate) * up (M, width), gate =
// gate_up[:, :width], up = gate_up[:, width:]; the gradient flows back to gate_up as one (M, 2 * width)
// tensor. Fused (one kernel each way, no copies of the halves) where the policy fuses elementwise
// ops and gate_up is on a CUDA device; otherwise ATen's composition on the two narrowed views.
at::Tensor swiglu_gate_up(const at::Tensor& gate_up, int64_t width, const KernelPolicy& kernels);

// Throws an Error naming `caller` and what is wrong unless gate_up is (M, 2 * width) with width > 0
// and unit stride along its columns.
void check_gate_up_layout(const at::Tensor& gate_up, int64_t width, const std::string& caller);

}  // namespace finetune
