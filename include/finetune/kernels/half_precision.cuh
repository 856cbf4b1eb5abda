// Device helpers shared by the fused kernels (model/cuda, lora/cuda): conversions between the
// half-precision element types and fp32 (and fp32's identity, for kernels that also run fp32),
// rounding an fp32 value as an ATen op's output would be, packs of eight elements (one
// 16-byte access in the half types, two in fp32), and the row and column of a thread that
// handles `Width` consecutive columns of a row.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace finetune::cuda_kernels {

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
// v rounded to T and back: what ATen stores when an op computed in fp32 writes a T tensor.
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_float(from_float<T>(v)); }

constexpr int kPack = 8;  // elements per 16-byte access of a half type

// Eight elements, loaded and stored as one 16-byte access (two for fp32) from a 16-byte-aligned address.
template <typename T>
struct alignas(16) Pack {
  T v[kPack];
};

// `Width` consecutive elements at p (kPack: one 16-byte load; 1: a single element in v[0]).
template <typename T, int Width>
__device__ __forceinline__ Pack<T> load(const T* p) {
  Pack<T> out;
  if constexpr (Width == kPack) {
    out = *reinterpret_cast<const Pack<T>*>(p);
  } else {
    out.v[0] = *p;
  }
  return out;
}

template <typename T, int Width>
__device__ __forceinline__ void store(T* p, const Pack<T>& values) {
  if constexpr (Width == kPack) {
    *reinterpret_cast<Pack<T>*>(p) = values;
  } else {
    *p = values.v[0];
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A grid of `rows` rows of `columns` columns (a multiple of Width), one thread per `Width`
// consecutive columns of a row, threads numbered across blocks row by row: this thread's row and
// its first column; false for a thread past the last row.
struct RowChunk {
  int64_t row;
  int64_t column;
};
template <int Width>
__device__ __forceinline__ bool thread_row_chunk(int64_t rows, int64_t columns, RowChunk& chunk) {
  const int64_t chunks_per_row = columns / Width;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (thread >= rows * chunks_per_row) return false;
  chunk.row = thread / chunks_per_row;
  chunk.column = (thread % chunks_per_row) * Width;
  return true;
}

}  // namespace finetune::cuda_kernels
