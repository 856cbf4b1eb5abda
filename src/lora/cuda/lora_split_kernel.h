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

}  // namespace finetune::cuda_kernels
