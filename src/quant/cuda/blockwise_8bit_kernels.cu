// Blockwise 8-bit quantization on the GPU, one warp per block of `blocksize` elements, with either
// of bitsandbytes' two rules for picking the code: its CPU kernel's (the quantize_blockwise
// contract; Note [bitsandbytes' CPU 8-bit quantizer], blockwise_8bit.cpp), in IEEE arithmetic, or
// its CUDA kernel's (kQuantizeBlockwise, for the nested NF4 absmax of a weight quantized on the
// GPU; Note [bitsandbytes' CPU and CUDA 4-bit quantizers], nf4.cpp), in its fast-math arithmetic.
#include "blockwise_8bit_kernels.h"

#include <cfloat>

#include "finetune/kernels/bnb_fast_math.cuh"
#include "finetune/kernels/half_precision.cuh"

namespace finetune::cuda_kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kCodeSize = 256;
constexpr float kGridLast = 65535.0f;  // the CPU table's last grid point

__device__ __forceinline__ float load_float(const float* p) { return *p; }
__device__ __forceinline__ float load_float(const __nv_bfloat16* p) { return to_float(*p); }
__device__ __forceinline__ float load_float(const __half* p) { return to_float(*p); }

// The CPU table's entry for a scaled value: the table index computed as the CPU does (fmaf
// included), then the number of midpoints below that grid point's value (a binary search; equal
// to the CPU's sequential build because the midpoints of a sorted code are non-decreasing).
__device__ __forceinline__ uint8_t cpu_table_code(const float* midpoints, float scaled) {
  const float c = scaled < -1.0f ? -1.0f : (1.0f < scaled ? 1.0f : scaled);  // NaN passes
  const float g = __fmaf_rn(__fmul_rn(__fadd_rn(c, 1.0f), 0.5f), kGridLast, 0.5f);
  const int index = isnan(g) ? 0 : static_cast<int>(g);
  const float value = __fadd_rn(__fdiv_rn(2.0f * static_cast<float>(index), kGridLast), -1.0f);
  int lo = 0, hi = kCodeSize - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (midpoints[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return static_cast<uint8_t>(lo);
}

// bitsandbytes' CUDA code search (dQuantize without rounding noise): seven halving steps from
// pivot 127 reach an even pivot p with code[p - 1] < x <= code[p + 1]; the value then goes to
// whichever neighbour is nearer, and a tie to p.
__device__ __forceinline__ uint8_t cuda_search_code(const float* code, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f;
  float value = code[pivot];
  for (int step = 64; step > 0; step >>= 1) {
    if (x > value) {
      lower_pivot = pivot;
      lower = value;
      pivot += step;
    } else {
      upper_pivot = pivot;
      upper = value;
      pivot -= step;
    }
    value = code[pivot];
  }
  if (upper_pivot == 255) upper = code[upper_pivot];
  if (lower_pivot == 0) lower = code[lower_pivot];
  if (x > value) {
    return static_cast<uint8_t>(x > __fmul_rn(__fadd_rn(upper, value), 0.5f) ? upper_pivot : pivot);
  }
  return static_cast<uint8_t>(x < __fmul_rn(__fadd_rn(lower, value), 0.5f) ? lower_pivot : pivot);
}

template <typename T, Nearest8bit Rule>
__global__ void quantize_blockwise_kernel(const T* __restrict__ A, const float* __restrict__ code,
                                          float* __restrict__ absmax, uint8_t* __restrict__ codes, int64_t n,
                                          int64_t blocksize) {
  __shared__ float s_code[kCodeSize];
  __shared__ float s_midpoints[kCodeSize - 1];
  for (int i = threadIdx.x; i < kCodeSize; i += blockDim.x) s_code[i] = code[i];
  __syncthreads();
  if constexpr (Rule == Nearest8bit::CpuTable) {
    for (int i = threadIdx.x; i < kCodeSize - 1; i += blockDim.x) {
      s_midpoints[i] = __fmul_rn(0.5f, __fadd_rn(s_code[i], s_code[i + 1]));
    }
    __syncthreads();
  }
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  for (int64_t b = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; b < blocks; b += warps) {
    const int64_t start = b * blocksize;
    const int64_t length = min(blocksize, n - start);
    const T* block = A + start;

    float largest = Rule == Nearest8bit::CpuTable ? -INFINITY : -FLT_MAX;  // kQuantizeBlockwise starts at -FLT_MAX
    for (int64_t i = lane; i < length; i += kWarp) {
      if constexpr (Rule == Nearest8bit::CpuTable) {
        const float magnitude = fabsf(load_float(block + i));
        largest = largest < magnitude ? magnitude : largest;  // a NaN never wins
      } else {
        largest = fmaxf(largest, fabsf(flush_ftz(load_float(block + i))));
      }
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, largest, offset);
      largest = largest < other ? other : largest;  // partial maxima hold no NaN
    }
    float scale;
    if constexpr (Rule == Nearest8bit::CpuTable) {
      scale = 0.0f > largest ? 0.0f : largest;
    } else {
      // kQuantizeBlockwise reduces the zero padding of a short last block along with its values.
      scale = length < blocksize ? fmaxf(largest, 0.0f) : largest;
    }
    if (lane == 0) absmax[b] = scale;

    uint8_t* out = codes + start;
    if constexpr (Rule == Nearest8bit::CpuTable) {
      if (scale == 0.0f) {
        for (int64_t i = lane; i < length; i += kWarp) out[i] = 0;
        continue;
      }
      const float inverse = __frcp_rn(scale);
      for (int64_t i = lane; i < length; i += kWarp) {
        out[i] = cpu_table_code(s_midpoints, __fmul_rn(load_float(block + i), inverse));
      }
    } else {
      const float inverse = reciprocal_approx(scale);
      for (int64_t i = lane; i < length; i += kWarp) {
        out[i] = cuda_search_code(s_code, mul_ftz(flush_ftz(load_float(block + i)), inverse));
      }
    }
  }
}

template <typename T>
cudaError_t launch(const void* A, const float* code, float* absmax, uint8_t* codes, int64_t n, int64_t blocksize,
                   Nearest8bit rule, cudaStream_t stream) {
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  constexpr int64_t kWarpsPerCta = kThreads / kWarp;
  const int64_t ctas = (blocks + kWarpsPerCta - 1) / kWarpsPerCta;
  const auto grid = static_cast<unsigned>(ctas < 65535 ? ctas : 65535);  // the warps stride over the rest
  const auto* input = static_cast<const T*>(A);
  if (rule == Nearest8bit::CpuTable) {
    quantize_blockwise_kernel<T, Nearest8bit::CpuTable>
        <<<grid, kThreads, 0, stream>>>(input, code, absmax, codes, n, blocksize);
  } else {
    quantize_blockwise_kernel<T, Nearest8bit::CudaSearch>
        <<<grid, kThreads, 0, stream>>>(input, code, absmax, codes, n, blocksize);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t quantize_blockwise_8bit(ElementKind kind, const void* A, const float* code, float* absmax,
                                    uint8_t* codes, int64_t n, int64_t blocksize, Nearest8bit rule,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (kind) {
    case ElementKind::Float32: return launch<float>(A, code, absmax, codes, n, blocksize, rule, stream);
    case ElementKind::BFloat16: return launch<__nv_bfloat16>(A, code, absmax, codes, n, blocksize, rule, stream);
    case ElementKind::Float16: return launch<__half>(A, code, absmax, codes, n, blocksize, rule, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace finetune::cuda_kernels
