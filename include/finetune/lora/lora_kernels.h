// The small elementwise step between the LoRA GEMMs of half_precision_lora_linear.cpp: one CUDA
// kernel on the GPU, the same arithmetic in ATen ops elsewhere.
#pragma once

#include <vector>

#include <ATen/ATen.h>

namespace finetune {

// fp32 t -> [t_hi, t_lo] in `dtype` concatenated along `dim`, t_hi = half(t), t_lo = half(t - t_hi);
// t_hi alone is its first block.
at::Tensor split_hi_lo(const at::Tensor& t, at::ScalarType dtype, int64_t dim);

// One split_hi_lo written into an existing tensor: out (the split's shape, contiguous, half
// precision) <- split_hi_lo(source, out's dtype, dim), source contiguous fp32 and 2-D.
struct SplitTarget {
  at::Tensor source;
  at::Tensor out;
  int64_t dim = 0;
};

// Every target's split, in place. On CUDA (with `cuda_kernel`, all targets on one device and of
// one dtype) one kernel writes all of them; otherwise each is split_hi_lo copied into its out.
void split_hi_lo_into(const std::vector<SplitTarget>& targets, bool cuda_kernel);

// The sum of the two equal halves along `dim` of a product with a split operand.
at::Tensor sum_halves(const at::Tensor& product, int64_t dim);

// product (rows, 2r) fp32, the result of a GEMM against a [hi, lo] split operand ->
// (rows, 2r) in `dtype`: [half(v), half(v - half(v))] with v = scaling * (product[:, :r] + product[:, r:]),
// i.e. the scaled fp32 intermediate, split for the next GEMMs (Note [Split fp32 operands]).
// `cuda_kernel` (KernelPolicy::lora_split_kernel) runs it as one CUDA kernel on a contiguous
// CUDA product; otherwise as ATen ops.
at::Tensor scaled_sum_split(const at::Tensor& product, double scaling, at::ScalarType dtype, bool cuda_kernel);

}  // namespace finetune
