// 4-bit (NF4/FP4) weights on the GPU. Quantization reproduces bitsandbytes' CUDA kernels
// (kQuantizeBlockwiseSmall / kQuantizeBlockwise with the dQuantizeNF4 / dQuantizeFP4 decision
// trees) in their fast-math arithmetic, one warp per block; dequantization is a memory-bound pass
// that rebuilds each block's absmax inline from the nested statistics (as bitsandbytes'
// dequantize_blockwise + offset add + kDequantizeBlockwise compute it) and writes 16 elements per
// thread; the pieces of an expert stack (up to 256 weights) dequantize in one launch, one grid row
// (blockIdx.y) per piece, with the same per-element code as one weight's launch. Note
// [bitsandbytes' CPU and CUDA 4-bit quantizers] (nf4.cpp) says where CPU and CUDA differ.
#include "nf4_kernels.h"

#include <algorithm>
#include <cfloat>
#include <vector>

#include "finetune/kernels/bnb_fast_math.cuh"
#include "finetune/kernels/half_precision.cuh"

namespace finetune::cuda_kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kGroup = 16;  // elements per thread in the vectorised dequantize kernel (8 packed bytes)

__device__ __forceinline__ float load_float(const float* p) { return *p; }
__device__ __forceinline__ float load_float(const __nv_bfloat16* p) { return to_float(*p); }
__device__ __forceinline__ float load_float(const __half* p) { return to_float(*p); }

// dQuantizeNF4: the code is the number of its thresholds below x (a value on one goes down; NaN
// gets 0). They are the fp32 midpoints of neighbouring NF4 values, as bitsandbytes writes them.
__device__ __forceinline__ uint8_t nf4_code(float x) {
  constexpr float kThresholds[15] = {
      -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
      -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
      0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
      0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f};
  uint8_t code = 0;
#pragma unroll
  for (int k = 0; k < 15; ++k) code += x > kThresholds[k] ? 1 : 0;
  return code;
}

// dQuantizeFP4: a sign bit (x < 0) and the magnitude's rank among bitsandbytes' thresholds (not all
// of them midpoints: 0.583333f and 0.8333333f are written short), mapped to FP4's bit patterns.
__device__ __forceinline__ uint8_t fp4_code(float x) {
  constexpr float kThresholds[7] = {0.00260417f, 0.0859375f, 0.20833333f, 0.29166667f,
                                    0.4166667f,  0.583333f,  0.8333333f};
  constexpr uint8_t kPattern[8] = {0b000, 0b001, 0b110, 0b111, 0b100, 0b101, 0b010, 0b011};
  const float magnitude = fabsf(x);
  int rank = 0;
#pragma unroll
  for (int k = 0; k < 7; ++k) rank += magnitude > kThresholds[k] ? 1 : 0;
  return static_cast<uint8_t>(kPattern[rank] + (x < 0.0f ? 0b1000 : 0));
}

template <Code4bit Type>
__device__ __forceinline__ uint8_t encode(float scaled) {
  if constexpr (Type == Code4bit::NF4) {
    return nf4_code(scaled);
  } else {
    return fp4_code(scaled);
  }
}

template <typename T, Code4bit Type>
__global__ void quantize_4bit_kernel(const T* __restrict__ A, float* __restrict__ absmax,
                                     uint8_t* __restrict__ packed, int64_t n, int64_t blocksize) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  for (int64_t b = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; b < blocks; b += warps) {
    const int64_t start = b * blocksize;
    const int64_t length = min(blocksize, n - start);
    float largest = -FLT_MAX;
    for (int64_t i = lane; i < length; i += kWarp) largest = fmaxf(largest, fabsf(flush_ftz(load_float(A + start + i))));
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    }
    // bitsandbytes reduces the zero padding of a short last block along with its values.
    if (length < blocksize) largest = fmaxf(largest, 0.0f);
    if (lane == 0) absmax[b] = largest;

    const float inverse = reciprocal_approx(largest);  // inf for a block of zeros: its codes become 0 (0 * inf = NaN)
    const int64_t bytes = (length + 1) / 2;
    for (int64_t k = lane; k < bytes; k += kWarp) {
      const int64_t e = start + 2 * k;
      const float first = load_float(A + e);
      const float second = e + 1 < n ? load_float(A + e + 1) : 0.0f;  // an odd count pads with zero
      packed[start / 2 + k] = static_cast<uint8_t>((encode<Type>(mul_ftz(first, inverse)) << 4) |
                                                   encode<Type>(mul_ftz(second, inverse)));
    }
  }
}

template <typename T>
__device__ __forceinline__ T from_fp32(float v);
template <>
__device__ __forceinline__ float from_fp32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_fp32<__nv_bfloat16>(float v) { return from_float<__nv_bfloat16>(v); }
template <>
__device__ __forceinline__ __half from_fp32<__half>(float v) { return from_float<__half>(v); }

// A value as bitsandbytes stores it in the weight's dtype, then cast to T.
template <typename T>
__device__ __forceinline__ T output_value(float v, ElementKind weight_kind) {
  if (weight_kind == ElementKind::BFloat16) {
    v = round_to<__nv_bfloat16>(v);
  } else if (weight_kind == ElementKind::Float16) {
    v = round_to<__half>(v);
  }
  return from_fp32<T>(v);
}

// The absmax of 4-bit block `block`: bitsandbytes' 8-bit dequantize (fast-math multiply), then the
// offset added by an ATen op (IEEE).
__device__ __forceinline__ float block_absmax(const Absmax4bit& a, int64_t block) {
  if (a.codes == nullptr) return __ldg(a.absmax + block);
  const float nested = mul_ftz(__ldg(a.nested_code + __ldg(a.codes + block)),
                                    __ldg(a.nested_absmax + block / a.nested_blocksize));
  return __fadd_rn(nested, __ldg(a.offset));
}

template <typename T>
struct alignas(16) Group {
  T v[kGroup];
};

// Group g (16 elements, 8 packed bytes) of a weight: n % 16 == 0, blocksize % 16 == 0, packed
// 8-byte and out 16-byte aligned. table: the 16 code values.
template <typename T>
__device__ __forceinline__ void dequantize_group(const uint8_t* __restrict__ packed, const float* table,
                                                 const Absmax4bit& a, int64_t blocksize, int64_t g,
                                                 ElementKind weight_kind, T* __restrict__ out) {
  const uint2 bytes = __ldg(reinterpret_cast<const uint2*>(packed) + g);
  const float scale = block_absmax(a, g * kGroup / blocksize);
  Group<T> values;
#pragma unroll
  for (int j = 0; j < kGroup / 2; ++j) {
    const unsigned byte = ((j < 4 ? bytes.x : bytes.y) >> (8 * (j % 4))) & 0xffu;
    values.v[2 * j] = output_value<T>(mul_ftz(table[byte >> 4], scale), weight_kind);
    values.v[2 * j + 1] = output_value<T>(mul_ftz(table[byte & 0xfu], scale), weight_kind);
  }
  reinterpret_cast<Group<T>*>(out)[g] = values;
}

// Packed byte k (elements 2k and 2k + 1 < n) of a weight of any n and (even) blocksize.
template <typename T>
__device__ __forceinline__ void dequantize_byte(const uint8_t* __restrict__ packed, const float* table,
                                                const Absmax4bit& a, int64_t blocksize, int64_t n, int64_t k,
                                                ElementKind weight_kind, T* __restrict__ out) {
  const unsigned byte = packed[k];
  const float scale = block_absmax(a, 2 * k / blocksize);
  out[2 * k] = output_value<T>(mul_ftz(table[byte >> 4], scale), weight_kind);
  if (2 * k + 1 < n) out[2 * k + 1] = output_value<T>(mul_ftz(table[byte & 0xfu], scale), weight_kind);
}

// One thread per 16 elements (dequantize_group's conditions).
template <typename T>
__global__ void dequantize_4bit_group_kernel(const uint8_t* __restrict__ packed, Table4bit table, Absmax4bit a,
                                             int64_t blocksize, int64_t groups, ElementKind weight_kind,
                                             T* __restrict__ out) {
  __shared__ float s_table[16];
  if (threadIdx.x < 16) s_table[threadIdx.x] = table.value[threadIdx.x];
  __syncthreads();
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dequantize_group(packed, s_table, a, blocksize, g, weight_kind, out);
  }
}

// Any n and blocksize (even, as bitsandbytes' are): one thread per packed byte.
template <typename T>
__global__ void dequantize_4bit_byte_kernel(const uint8_t* __restrict__ packed, Table4bit table, Absmax4bit a,
                                            int64_t blocksize, int64_t n, ElementKind weight_kind,
                                            T* __restrict__ out) {
  const int64_t bytes = (n + 1) / 2;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < bytes;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dequantize_byte(packed, table.value, a, blocksize, n, k, weight_kind, out);
  }
}

struct PieceBatch {
  Dequantize4bitPiece piece[kMaxDequantizePiecesPerLaunch];
};

// blockIdx.y picks the piece; the x blocks stride over its groups (Grouped: every piece meets
// dequantize_group's conditions) or packed bytes. __grid_constant__: the pieces are read in place
// from the parameter space, never copied per thread.
template <typename T, bool Grouped>
__global__ void dequantize_4bit_pieces_kernel(const __grid_constant__ PieceBatch batch,
                                              const __grid_constant__ Table4bit table, ElementKind weight_kind) {
  __shared__ float s_table[16];
  if (threadIdx.x < 16) s_table[threadIdx.x] = table.value[threadIdx.x];
  __syncthreads();
  const Dequantize4bitPiece& piece = batch.piece[blockIdx.y];
  T* out = static_cast<T*>(piece.out);
  const int64_t items = Grouped ? piece.n / kGroup : (piece.n + 1) / 2;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (Grouped) {
      dequantize_group(piece.packed, s_table, piece.absmax, piece.blocksize, i, weight_kind, out);
    } else {
      dequantize_byte(piece.packed, s_table, piece.absmax, piece.blocksize, piece.n, i, weight_kind, out);
    }
  }
}

unsigned grid_for(int64_t items) {
  const int64_t ctas = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(ctas < 65535 ? ctas : 65535);  // grid-stride loops cover the rest
}

template <typename T, Code4bit Type>
cudaError_t launch_quantize(const void* A, float* absmax, uint8_t* packed, int64_t n, int64_t blocksize,
                            cudaStream_t stream) {
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  quantize_4bit_kernel<T, Type><<<grid_for(blocks * kWarp), kThreads, 0, stream>>>(static_cast<const T*>(A), absmax,
                                                                                   packed, n, blocksize);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_quantize(const void* A, float* absmax, uint8_t* packed, int64_t n, int64_t blocksize,
                            Code4bit type, cudaStream_t stream) {
  return type == Code4bit::NF4 ? launch_quantize<T, Code4bit::NF4>(A, absmax, packed, n, blocksize, stream)
                               : launch_quantize<T, Code4bit::FP4>(A, absmax, packed, n, blocksize, stream);
}

bool groups_apply(const uint8_t* packed, int64_t blocksize, int64_t n, const void* out) {
  return n % kGroup == 0 && blocksize % kGroup == 0 && reinterpret_cast<uintptr_t>(packed) % 8 == 0 && aligned16(out);
}

template <typename T>
cudaError_t launch_dequantize(const uint8_t* packed, const Table4bit& table, const Absmax4bit& absmax,
                              int64_t blocksize, int64_t n, ElementKind weight_kind, void* out, cudaStream_t stream) {
  auto* typed = static_cast<T*>(out);
  if (groups_apply(packed, blocksize, n, out)) {
    const int64_t groups = n / kGroup;
    dequantize_4bit_group_kernel<T><<<grid_for(groups), kThreads, 0, stream>>>(packed, table, absmax, blocksize,
                                                                               groups, weight_kind, typed);
  } else {
    dequantize_4bit_byte_kernel<T><<<grid_for((n + 1) / 2), kThreads, 0, stream>>>(packed, table, absmax, blocksize,
                                                                                   n, weight_kind, typed);
  }
  return cudaGetLastError();
}

// At most kMaxDequantizePiecesPerLaunch pieces, none empty: one launch.
template <typename T>
cudaError_t launch_dequantize_pieces(const Dequantize4bitPiece* pieces, int64_t count, const Table4bit& table,
                                     ElementKind weight_kind, cudaStream_t stream) {
  PieceBatch batch;
  bool grouped = true;
  int64_t most_items = 0;
  for (int64_t p = 0; p < count; ++p) {
    const Dequantize4bitPiece& piece = pieces[p];
    batch.piece[p] = piece;
    grouped = grouped && groups_apply(piece.packed, piece.blocksize, piece.n, piece.out);
    most_items = std::max(most_items, (piece.n + 1) / 2);
  }
  const dim3 grid(grid_for(grouped ? most_items * 2 / kGroup : most_items), static_cast<unsigned>(count));
  if (grouped) {
    dequantize_4bit_pieces_kernel<T, true><<<grid, kThreads, 0, stream>>>(batch, table, weight_kind);
  } else {
    dequantize_4bit_pieces_kernel<T, false><<<grid, kThreads, 0, stream>>>(batch, table, weight_kind);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_dequantize_pieces_chunked(const Dequantize4bitPiece* pieces, int64_t count, const Table4bit& table,
                                             ElementKind weight_kind, cudaStream_t stream) {
  std::vector<Dequantize4bitPiece> nonempty;
  for (int64_t p = 0; p < count; ++p) {
    if (pieces[p].n > 0) nonempty.push_back(pieces[p]);
  }
  for (size_t begin = 0; begin < nonempty.size(); begin += kMaxDequantizePiecesPerLaunch) {
    const int64_t left = static_cast<int64_t>(nonempty.size() - begin);
    const int64_t chunk = std::min<int64_t>(kMaxDequantizePiecesPerLaunch, left);
    const cudaError_t error = launch_dequantize_pieces<T>(nonempty.data() + begin, chunk, table, weight_kind, stream);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t quantize_4bit(ElementKind kind, const void* A, float* absmax, uint8_t* packed, int64_t n,
                          int64_t blocksize, Code4bit type, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (kind) {
    case ElementKind::Float32: return launch_quantize<float>(A, absmax, packed, n, blocksize, type, stream);
    case ElementKind::BFloat16: return launch_quantize<__nv_bfloat16>(A, absmax, packed, n, blocksize, type, stream);
    case ElementKind::Float16: return launch_quantize<__half>(A, absmax, packed, n, blocksize, type, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t dequantize_4bit(const uint8_t* packed, const Table4bit& table, const Absmax4bit& absmax,
                            int64_t blocksize, int64_t n, ElementKind weight_kind, ElementKind out_kind, void* out,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (out_kind) {
    case ElementKind::Float32:
      return launch_dequantize<float>(packed, table, absmax, blocksize, n, weight_kind, out, stream);
    case ElementKind::BFloat16:
      return launch_dequantize<__nv_bfloat16>(packed, table, absmax, blocksize, n, weight_kind, out, stream);
    case ElementKind::Float16:
      return launch_dequantize<__half>(packed, table, absmax, blocksize, n, weight_kind, out, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t dequantize_4bit_pieces(const Dequantize4bitPiece* pieces, int64_t count, const Table4bit& table,
                                   ElementKind weight_kind, ElementKind out_kind, cudaStream_t stream) {
  switch (out_kind) {
    case ElementKind::Float32:
      return launch_dequantize_pieces_chunked<float>(pieces, count, table, weight_kind, stream);
    case ElementKind::BFloat16:
      return launch_dequantize_pieces_chunked<__nv_bfloat16>(pieces, count, table, weight_kind, stream);
    case ElementKind::Float16:
      return launch_dequantize_pieces_chunked<__half>(pieces, count, table, weight_kind, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace finetune::cuda_kernels
