// The small elementwise step between the LoRA GEMMs of half_precision_lora_linear.cpp: one CUDA
// kernel on the GPU, the same arithmetic in ATen ops elsewhere.
#pragma once

#include <ATen/ATen.h>

namespace finetune {

// product (rows, 2r) fp32, the result of a GEMM against a [hi, lo] split operand ->
// (rows, 2r) in `dtype`: [half(v), half(v - half(v))] with v = scaling * (product[:, :r] + product[:, r:]),
// i.e. the scaled fp32 intermediate, split for the next GEMMs (Note [Split fp32 operands]).
at::Tensor scaled_sum_split(const at::Tensor& product, double scaling, at::ScalarType dtype);

}  // namespace finetune
