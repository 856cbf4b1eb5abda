// RMSNorm exactly as transformers' LlamaRMSNorm: normalise in fp32, cast back, then scale:
//   weight * (x.float() * rsqrt(mean(x.float()^2, -1) + eps)).to(x.dtype)
// With fused_kernel (KernelPolicy::fused_rms_norm: CUDA bf16/fp16) ATen's fused kernel computes
// the same expression with a single rounding.
#pragma once

#include <ATen/ATen.h>

namespace finetune {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool fused_kernel);

// Gemma's RMSNorm (Gemma2RMSNorm, Gemma3RMSNorm): normalise and scale in fp32 by (1 + weight), then cast:
//   (x.float() * rsqrt(mean(x.float()^2, -1) + eps) * (1 + weight.float())).to(x.dtype)
at::Tensor rms_norm_unit_offset(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace finetune
