// Launcher of the LoRA intermediate's fused sum-scale-split (lora_split_kernel.cu); plain CUDA.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "finetune/kernels/half_kind.h"

namespace finetune::cuda_kernels {

// product (rows, 2r) fp32 -> out (rows, 2r) of `kind`:
//   v = scaling * (product[:, :r] + product[:, r:]);  out[:, :r] = half(v);  out[:, r:] = half(v - half(v))
cudaError_t lora_scaled_sum_split(const float* product, void* out, int64_t rows, int64_t r, float scaling,
                                  HalfKind kind, cudaStream_t stream);

// One fp32 matrix (rows, cols), contiguous, split into [hi, lo] halves of `kind` along `dim`:
// dim 0 -> out (2 rows, cols) = [hi; lo]; dim 1 -> out (rows, 2 cols) = [hi, lo].
struct SplitOperandJob {
  const float* source;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t dim;
};

// Every job of `jobs` (a device array of `count` jobs, the largest `max_elements` elements) in one
// launch: hi = half(t), lo = half(t - hi), as split_hi_lo (lora/lora_kernels.h) computes them.
cudaError_t lora_split_operands(const SplitOperandJob* jobs, int64_t count, int64_t max_elements, HalfKind kind,
                                cudaStream_t stream);

// The same for at most kSplitJobsByValue jobs read from host memory: they travel as the kernel's
// arguments, so the launch needs no copy and can be captured in a CUDA graph.
constexpr int64_t kSplitJobsByValue = 2;
cudaError_t lora_split_operands_by_value(const SplitOperandJob* host_jobs, int64_t count, int64_t max_elements,
                                         HalfKind kind, cudaStream_t stream);

}  // namespace finetune::cuda_kernels
