// Products of half-precision (bf16/fp16) operands whose fp32 accumulator is kept: the adapters'
// split-operand GEMMs (lora/half_precision_lora_linear.h) and the LM head loss's vocabulary tiles
// (train/loss.h) sum such products over several GEMMs and round once at the end.
#pragma once

#include <ATen/ATen.h>

namespace finetune {

// a (m, k) @ b (k, n) -> (m, n) fp32, the GEMM's fp32 accumulator unrounded. With
// KernelPolicy::half_gemm_fp32_output (cuBLAS: at::mm with an fp32 out_dtype) in one call;
// otherwise (the CPU, where that overload does not exist) the operands are widened (exactly) and
// multiplied in fp32. fp32 operands: a plain fp32 product either way.
inline at::Tensor matmul_to_float(const at::Tensor& a, const at::Tensor& b, bool fp32_output_gemm) {
  if (a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat) return at::mm(a, b);
  if (fp32_output_gemm) return at::mm(a, b, at::kFloat);
  return at::mm(a.to(at::kFloat), b.to(at::kFloat));
}

}  // namespace finetune
