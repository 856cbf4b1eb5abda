// Fused CUDA kernels (src/model/cuda/*.cu, sm_90) for the memory-bound chains around the GEMMs,
// each as one autograd node with a fused backward. They compute transformers' bf16/fp16
// expressions with the same roundings in the same order (elementwise ops in fp32, rounded to the
// model dtype after each ATen op that HF's Python would run), in one pass over memory.
// Whether they run is KernelPolicy::fused_elementwise (kernel_policy.h); model/swiglu.h chooses
// between the SwiGLU ones and ATen. Builds without CUDA kernels throw if called.
#pragma once

#include <ATen/ATen.h>

namespace finetune {

// RoPE, HF's (x * cos) + (rotate_half(x) * sin): x (B, T, H, D) contiguous, cos/sin (B, T, D).
at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// RMSNorm over the head dimension, then RoPE: rope(rms_norm(x) * weight) for x (B, T, H, D) and a
// frozen weight (D) (Qwen3's q_norm / k_norm), cos/sin (B, T, D) contiguous of x's dtype, bf16 or
// fp16, D in {64, 128, 256} (fused_norm_rope_supported). The same roundings as ATen's fused
// RMSNorm followed by fused_rope; only the sum of squares is added in another order. One kernel
// each way; saves x and the rows' rstd, as the RMSNorm alone does.
bool fused_norm_rope_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos);
at::Tensor fused_norm_rope(const at::Tensor& x, const at::Tensor& weight, double eps, const at::Tensor& cos,
                           const at::Tensor& sin);

// SwiGLU, HF's act_fn(gate) * up with SiLU: gate, up (..., I) contiguous, same shape, bf16, fp16
// or fp32 (fused_swiglu_supported: false in builds without CUDA kernels).
bool fused_swiglu_supported(const at::Tensor& gate, const at::Tensor& up);
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);

// fused_swiglu's two kernels without its autograd node, for a node that keeps gate and up itself
// (lora/half_precision_lora_linear.h: the down projection of a SwiGLU MLP). gate, up, out and grad
// contiguous CUDA tensors of one shape and dtype (bf16, fp16 or fp32):
//   fused_swiglu_into:              out = silu(gate) * up, the bits fused_swiglu gives;
//   fused_swiglu_backward_in_place: from the output gradient, gate <- d gate and up <- d up, the
//                                   bits fused_swiglu's backward gives, written over its inputs.
void fused_swiglu_into(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out);
void fused_swiglu_backward_in_place(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up);

// The same SwiGLU on gate_up (M, 2 * width) read in place (any row stride, unit column stride):
// silu(gate_up[:, :width]) * gate_up[:, width:] (M, width), with the bits fused_swiglu gives on
// the two halves copied out. Its backward writes gate_up's gradient (M, 2 * width) in one kernel.
at::Tensor fused_swiglu_gate_up(const at::Tensor& gate_up, int64_t width);

}  // namespace finetune
