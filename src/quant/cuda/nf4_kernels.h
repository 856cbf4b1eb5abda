// Launchers of the 4-bit (NF4/FP4) quantize and dequantize kernels (nf4_kernels.cu); plain CUDA.
// Pointers are device pointers of contiguous buffers.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "element_kind.h"

namespace finetune::cuda_kernels {

enum class Code4bit { NF4, FP4 };

// bitsandbytes' CUDA quantize_4bit: A (n elements of `kind`) -> packed ((n + 1) / 2 bytes, the
// earlier element in the high nibble) and absmax (ceil(n / blocksize)).
cudaError_t quantize_4bit(ElementKind kind, const void* A, float* absmax, uint8_t* packed, int64_t n,
                          int64_t blocksize, Code4bit type, cudaStream_t stream);

// Where a 4-bit block's absmax comes from: `absmax` (fp32 per block) when not nested, else
// nested_code[codes[block]] * nested_absmax[block / nested_blocksize] + *offset.
struct Absmax4bit {
  const float* absmax = nullptr;
  const uint8_t* codes = nullptr;
  const float* nested_absmax = nullptr;
  const float* nested_code = nullptr;  // 256 values
  const float* offset = nullptr;       // one value
  int64_t nested_blocksize = 256;
};

// The value of each 4-bit code (bitsandbytes' dequantization table).
struct Table4bit {
  float value[16];
};

// out (n elements of out_kind) = table[code] * absmax, computed in fp32, rounded to weight_kind
// (the quantized weight's original dtype), then to out_kind.
cudaError_t dequantize_4bit(const uint8_t* packed, const Table4bit& table, const Absmax4bit& absmax,
                            int64_t blocksize, int64_t n, ElementKind weight_kind, ElementKind out_kind, void* out,
                            cudaStream_t stream);

// One weight of a batched dequantization: its codes, statistics and output buffer.
struct Dequantize4bitPiece {
  const uint8_t* packed = nullptr;
  Absmax4bit absmax;
  int64_t blocksize = 64;
  int64_t n = 0;
  void* out = nullptr;  // n elements of the batch's out_kind
};

// The pieces one launch takes, as a kernel parameter (20 KiB of the 32 KiB CUDA 12.1+ allows).
constexpr int64_t kMaxDequantizePiecesPerLaunch = 256;

// dequantize_4bit of every piece (same table, weight_kind and out_kind), bit for bit, in one kernel
// launch per kMaxDequantizePiecesPerLaunch pieces (an expert stack's pieces: nf4_stack.h).
cudaError_t dequantize_4bit_pieces(const Dequantize4bitPiece* pieces, int64_t count, const Table4bit& table,
                                   ElementKind weight_kind, ElementKind out_kind, cudaStream_t stream);

}  // namespace finetune::cuda_kernels
