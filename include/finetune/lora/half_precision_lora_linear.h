// A LoRA linear as one autograd node, for half-precision (bf16/fp16) base models:
//
//   y = x W^T + bias + scaling * (x A^T) B^T
//
// PEFT computes the low-rank branch by casting x to fp32, running two fp32 matmuls, adding the
// fp32 update to the base output and casting back. On a bf16 model that moves about
// 6*in + 32*out bytes per token through memory around every adapted projection, as much traffic
// as the base GEMMs themselves. Here the same sum is formed inside the GEMMs instead: every
// product reads bf16 operands and accumulates in fp32, and the low-rank update is accumulated
// into the base output by the GEMM's epilogue (addmm with beta=1), so the sum is rounded to bf16
// once, as in PEFT. The adapter gradients and the (tokens x r) intermediates they are formed
// from keep about fp32 accuracy (split operands); the update added to the bf16 output and to the
// input gradient uses the bf16-rounded factors, an error of at most bf16 rounding of the update.
//
// Used when the kernel policy says so (CUDA bf16/fp16), the input is half precision and no LoRA
// dropout is drawn (LoraAdapter::uses_half_precision_path); everywhere else PEFT's exact
// expression runs (lora_adapter.h), which the CPU parity tests compare bit for bit. The function
// itself also runs on the CPU (the tests compare it there against PEFT's expression in float64).
#pragma once

#include <ATen/ATen.h>

#include "finetune/lora/lora_adapter.h"

namespace finetune {

// The adapter weights as the GEMMs read them, split into half-precision hi/lo parts (Note [Split
// fp32 operands] in the .cpp): built once per optimizer step instead of in every layer call.
// 4 bytes per adapter weight (an 8B model's r=16 adapters: 0.16 GiB).
struct HalfPrecisionOperands {
  const c10::TensorImpl* lora_A_impl = nullptr;
  const c10::TensorImpl* lora_B_impl = nullptr;
  uint32_t lora_A_version = 0, lora_B_version = 0;
  at::ScalarType dtype = at::kBFloat16;
  at::Tensor A_split;         // (2r, in):  [hi; lo] of lora_A
  at::Tensor B_split;         // (out, 2r): [hi, lo] of lora_B
};

// The adapter's operands for `dtype`, from its cache when lora_A and lora_B are unchanged.
std::shared_ptr<const HalfPrecisionOperands> half_precision_operands(const LoraAdapter& adapter, at::ScalarType dtype);

// half_precision_operands of every adapter brought up to date: those whose lora_A or lora_B
// changed since their operands were made are re-split in place (a captured CUDA graph reads them
// at their addresses), all together (split_hi_lo_into: one kernel on CUDA with the adapters'
// KernelPolicy::lora_split_kernel); adapters without operands yet get them made. The same values
// as half_precision_operands one adapter at a time.
void refresh_half_precision_operands(const std::vector<const LoraAdapter*>& adapters, at::ScalarType dtype);

// LinearAdapter::refresh_derived_tensors of every adapter, the plain LoRA adapters' together
// (refresh_half_precision_operands), the others one by one.
void refresh_derived_tensors(const std::vector<const LinearAdapter*>& adapters, at::ScalarType dtype);

// x: (..., in_features) bf16/fp16; base's dense weight (out, in) and bias (out) in x's dtype (bias
// may be undefined) -> (..., out_features) in x's dtype. Differentiable in x, lora_A and lora_B.
// The weight is read through `base` in forward and again in backward (not saved), so a 4-bit base
// stays 4-bit between the two; `base` must outlive the backward pass.
at::Tensor half_precision_lora_linear(const at::Tensor& x, const Linear& base, const LoraAdapter& adapter);

// half_precision_lora_linear(silu(gate) * up, base, adapter) with the same bits forward and
// backward, for the down projection of a SwiGLU MLP (Note [SwiGLU into the down projection] in
// the .cpp): the node keeps gate and up, not their product, and its backward writes the gradients
// of gate and up over them. gate, up (..., I) contiguous CUDA bf16/fp16 of one shape, the caller's
// to give (nothing may read them after the backward); the fused SwiGLU kernels (model/fused_kernels.h).
// Differentiable in gate, up, lora_A and lora_B.
at::Tensor half_precision_lora_swiglu_linear(const at::Tensor& gate, const at::Tensor& up, const Linear& base,
                                             const LoraAdapter& adapter);

}  // namespace finetune
