// CUDA entry point of blockwise_8bit.cpp on ATen tensors (cuda/blockwise_8bit_launch.cpp, CUDA
// builds only; callers guard with FINETUNE_WITH_CUDA). Internal to src/quant/.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace finetune::quant_cuda {

// Which of bitsandbytes' two 8-bit quantizers to reproduce (Note [bitsandbytes' CPU 8-bit
// quantizer], blockwise_8bit.cpp; Note [bitsandbytes' CPU and CUDA 4-bit quantizers], nf4.cpp).
enum class Rule8bit {
  CpuTable,    // csrc/cpu_ops.cpp: a 65536-entry table of codes (quantize_blockwise's contract)
  CudaSearch,  // csrc/kernels.cu kQuantizeBlockwise: binary search, then the nearer neighbour
};

// A (fp32/bf16/fp16, contiguous, CUDA) -> codes (uint8, A's numel) and absmax (fp32, blocks),
// both contiguous on A's device; code: 256 fp32 sorted ascending, contiguous on A's device.
void quantize_blockwise(const at::Tensor& A, const at::Tensor& code, int64_t blocksize, Rule8bit rule,
                        at::Tensor& codes, at::Tensor& absmax);

}  // namespace finetune::quant_cuda
