// Launcher of the blockwise 8-bit quantization kernel (blockwise_8bit_kernels.cu); plain CUDA.
// Pointers are device pointers of contiguous buffers.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "element_kind.h"

namespace finetune::cuda_kernels {

// Which bitsandbytes kernel's bytes to produce (../blockwise_8bit_cuda.h Rule8bit says more).
enum class Nearest8bit { CpuTable, CudaSearch };

// A (n elements of `kind`) -> codes (n) and absmax (ceil(n / blocksize)), with code[256] sorted ascending.
cudaError_t quantize_blockwise_8bit(ElementKind kind, const void* A, const float* code, float* absmax,
                                    uint8_t* codes, int64_t n, int64_t blocksize, Nearest8bit rule,
                                    cudaStream_t stream);

}  // namespace finetune::cuda_kernels
