// The LoRA intermediate (tokens x r) as the next GEMMs read it, in one kernel instead of five
// (add, scale, round, subtract, round + concatenate). Same arithmetic as the CPU expression in
// lora/lora_kernels.cpp, element by element.
#include "lora_split_kernel.h"

#include "finetune/kernels/half_precision.cuh"

namespace finetune::cuda_kernels {
namespace {

template <typename T>
__global__ void scaled_sum_split_kernel(const float* __restrict__ product, T* __restrict__ out, int64_t rows,
                                        int64_t r, float scaling) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * r) return;
  const int64_t row = index / r, j = index % r;
  const float* p = product + row * 2 * r;
  const float v = (p[j] + p[j + r]) * scaling;
  const T hi = from_float<T>(v);
  out[row * 2 * r + j] = hi;
  out[row * 2 * r + j + r] = from_float<T>(v - to_float(hi));
}

}  // namespace

cudaError_t lora_scaled_sum_split(const float* product, void* out, int64_t rows, int64_t r, float scaling,
                                  HalfKind kind, cudaStream_t stream) {
  const int64_t n = rows * r;
  if (n == 0) return cudaSuccess;
  constexpr int threads = 256;
  const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  if (kind == HalfKind::BFloat16) {
    scaled_sum_split_kernel<<<blocks, threads, 0, stream>>>(product, static_cast<__nv_bfloat16*>(out), rows, r, scaling);
  } else {
    scaled_sum_split_kernel<<<blocks, threads, 0, stream>>>(product, static_cast<__half*>(out), rows, r, scaling);
  }
  return cudaGetLastError();
}

}  // namespace finetune::cuda_kernels
