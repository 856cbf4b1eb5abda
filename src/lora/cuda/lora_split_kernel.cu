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

// One job's elements, the x blocks striding over them.
template <typename T>
__device__ void split_job(const SplitOperandJob& job) {
  T* out = static_cast<T*>(job.out);
  const int64_t n = job.rows * job.cols;
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < n;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = index / job.cols, col = index % job.cols;
    const float v = job.source[index];
    const T hi = from_float<T>(v);
    const T lo = from_float<T>(v - to_float(hi));
    if (job.dim == 0) {
      out[index] = hi;
      out[n + index] = lo;
    } else {
      out[row * 2 * job.cols + col] = hi;
      out[row * 2 * job.cols + job.cols + col] = lo;
    }
  }
}

// One job per blockIdx.y, from a device array.
template <typename T>
__global__ void split_operands_kernel(const SplitOperandJob* __restrict__ jobs) {
  split_job<T>(jobs[blockIdx.y]);
}

// One job per blockIdx.y, from the kernel's arguments.
struct SplitOperandArguments {
  SplitOperandJob jobs[kSplitJobsByValue];
};

template <typename T>
__global__ void split_operands_by_value_kernel(SplitOperandArguments arguments) {
  split_job<T>(arguments.jobs[blockIdx.y]);
}

constexpr int kSplitThreads = 256;

dim3 split_blocks(int64_t max_elements, int64_t jobs) {
  const int64_t wanted = (max_elements + kSplitThreads - 1) / kSplitThreads;
  return dim3(static_cast<unsigned>(wanted < 64 ? wanted : 64), static_cast<unsigned>(jobs));
}

}  // namespace

cudaError_t lora_split_operands(const SplitOperandJob* jobs, int64_t count, int64_t max_elements, HalfKind kind,
                                cudaStream_t stream) {
  if (count == 0 || max_elements == 0) return cudaSuccess;
  constexpr int64_t max_grid_y = 65535;
  for (int64_t first = 0; first < count; first += max_grid_y) {
    const int64_t chunk = count - first < max_grid_y ? count - first : max_grid_y;
    const dim3 blocks = split_blocks(max_elements, chunk);
    if (kind == HalfKind::BFloat16) {
      split_operands_kernel<__nv_bfloat16><<<blocks, kSplitThreads, 0, stream>>>(jobs + first);
    } else {
      split_operands_kernel<__half><<<blocks, kSplitThreads, 0, stream>>>(jobs + first);
    }
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

cudaError_t lora_split_operands_by_value(const SplitOperandJob* host_jobs, int64_t count, int64_t max_elements,
                                         HalfKind kind, cudaStream_t stream) {
  if (count < 0 || count > kSplitJobsByValue) return cudaErrorInvalidValue;
  if (count == 0 || max_elements == 0) return cudaSuccess;
  SplitOperandArguments arguments{};
  for (int64_t i = 0; i < count; ++i) arguments.jobs[i] = host_jobs[i];
  const dim3 blocks = split_blocks(max_elements, count);
  if (kind == HalfKind::BFloat16) {
    split_operands_by_value_kernel<__nv_bfloat16><<<blocks, kSplitThreads, 0, stream>>>(arguments);
  } else {
    split_operands_by_value_kernel<__half><<<blocks, kSplitThreads, 0, stream>>>(arguments);
  }
  return cudaGetLastError();
}

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
