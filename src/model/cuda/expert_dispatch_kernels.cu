// The expert dispatch kernels (Note [Gathered expert dispatch] in model/expert_dispatch.h): a
// gathered, weighted sum of rows (the combine, and the dispatch's backward) and the combine's
// backward. Every output element is written by one thread (or one warp, for a dot product), so
// the results do not depend on scheduling; sums accumulate in fp32 and round once.
#include "expert_dispatch_kernels.h"

#include <cstdint>
#include <type_traits>

#include "finetune/kernels/half_precision.cuh"

namespace finetune::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

int64_t blocks_for(int64_t threads) { return (threads + kThreads - 1) / kThreads; }

// A weight as fp32, whether it is stored as fp32 or as the rows' half type.
__device__ __forceinline__ float weight_value(float w) { return w; }
template <typename W>
__device__ __forceinline__ float weight_value(W w) { return to_float(w); }

template <typename W>
__device__ __forceinline__ W weight_from_float(float v) {
  if constexpr (std::is_same_v<W, float>) {
    return v;
  } else {
    return from_float<W>(v);
  }
}

// One thread per `Width` consecutive columns of one output row.
template <typename T, typename W, int Width>
__global__ void gathered_row_sum_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                                        const W* __restrict__ weights, T* __restrict__ out, int64_t rows,
                                        int64_t top_k, int64_t width) {
  RowChunk chunk;
  if (!thread_row_chunk<Width>(rows, width, chunk)) return;
  const int64_t row = chunk.row, column = chunk.column;
  float sum[Width];
#pragma unroll
  for (int e = 0; e < Width; ++e) sum[e] = 0.0f;
#pragma unroll 4
  for (int64_t j = 0; j < top_k; ++j) {
    const int64_t assignment = row * top_k + j;
    const float w = weights ? weight_value(weights[assignment]) : 1.0f;
    const auto values = load<T, Width>(src + index[assignment] * width + column);
#pragma unroll
    for (int e = 0; e < Width; ++e) sum[e] += w * to_float(values.v[e]);
  }
  Pack<T> result;
#pragma unroll
  for (int e = 0; e < Width; ++e) result.v[e] = from_float<T>(sum[e]);
  store<T, Width>(out + row * width + column, result);
}

// One warp per sorted row i; its lanes stride over the columns `Width` at a time.
template <typename T, typename W, int Width>
__global__ void combine_backward_kernel(const T* __restrict__ grad, const T* __restrict__ outputs,
                                        const W* __restrict__ weights, const int64_t* __restrict__ tokens,
                                        const int64_t* __restrict__ order, T* __restrict__ d_outputs,
                                        W* __restrict__ d_weights, int64_t rows, int64_t width) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // the whole warp: its lanes share `row`
  const int64_t assignment = order[row];
  const float w = weight_value(weights[assignment]);
  const T* grad_row = grad + tokens[row] * width;
  float dot = 0.0f;
#pragma unroll 4
  for (int64_t column = static_cast<int64_t>(lane) * Width; column < width; column += kWarp * Width) {
    const auto g = load<T, Width>(grad_row + column);
    if (d_outputs) {
      Pack<T> scaled;
#pragma unroll
      for (int e = 0; e < Width; ++e) scaled.v[e] = from_float<T>(w * to_float(g.v[e]));
      store<T, Width>(d_outputs + row * width + column, scaled);
    }
    if (d_weights) {
      const auto o = load<T, Width>(outputs + row * width + column);
#pragma unroll
      for (int e = 0; e < Width; ++e) dot += to_float(g.v[e]) * to_float(o.v[e]);
    }
  }
  if (!d_weights) return;
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
  if (lane == 0) d_weights[assignment] = weight_from_float<W>(dot);
}

template <typename T, typename W>
cudaError_t launch_gathered_row_sum(const void* src, const int64_t* index, const void* weights, void* out,
                                    int64_t rows, int64_t top_k, int64_t width, cudaStream_t stream) {
  const auto* s = static_cast<const T*>(src);
  const auto* w = static_cast<const W*>(weights);
  auto* o = static_cast<T*>(out);
  if (width % kPack == 0 && aligned16(src) && aligned16(out)) {
    gathered_row_sum_kernel<T, W, kPack>
        <<<blocks_for(rows * (width / kPack)), kThreads, 0, stream>>>(s, index, w, o, rows, top_k, width);
  } else {
    gathered_row_sum_kernel<T, W, 1><<<blocks_for(rows * width), kThreads, 0, stream>>>(s, index, w, o, rows, top_k,
                                                                                        width);
  }
  return cudaGetLastError();
}

template <typename T, typename W>
cudaError_t launch_combine_backward(const void* grad, const void* outputs, const void* weights, const int64_t* tokens,
                                    const int64_t* order, void* d_outputs, void* d_weights, int64_t rows,
                                    int64_t width, cudaStream_t stream) {
  const auto* g = static_cast<const T*>(grad);
  const auto* o = static_cast<const T*>(outputs);
  const auto* w = static_cast<const W*>(weights);
  auto* d_o = static_cast<T*>(d_outputs);
  auto* d_w = static_cast<W*>(d_weights);
  const int64_t blocks = blocks_for(rows * kWarp);
  if (width % kPack == 0 && aligned16(grad) && aligned16(outputs) && aligned16(d_outputs)) {
    combine_backward_kernel<T, W, kPack><<<blocks, kThreads, 0, stream>>>(g, o, w, tokens, order, d_o, d_w, rows,
                                                                          width);
  } else {
    combine_backward_kernel<T, W, 1><<<blocks, kThreads, 0, stream>>>(g, o, w, tokens, order, d_o, d_w, rows, width);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t gathered_row_sum(HalfKind kind, bool fp32_weights, const void* src, const int64_t* index,
                             const void* weights, void* out, int64_t rows, int64_t top_k, int64_t width,
                             cudaStream_t stream) {
  if (rows * width == 0) return cudaSuccess;
  if (kind == HalfKind::BFloat16) {
    return fp32_weights
               ? launch_gathered_row_sum<__nv_bfloat16, float>(src, index, weights, out, rows, top_k, width, stream)
               : launch_gathered_row_sum<__nv_bfloat16, __nv_bfloat16>(src, index, weights, out, rows, top_k, width,
                                                                       stream);
  }
  return fp32_weights ? launch_gathered_row_sum<__half, float>(src, index, weights, out, rows, top_k, width, stream)
                      : launch_gathered_row_sum<__half, __half>(src, index, weights, out, rows, top_k, width, stream);
}

cudaError_t combine_backward(HalfKind kind, bool fp32_weights, const void* grad, const void* outputs,
                             const void* weights, const int64_t* tokens, const int64_t* order, void* d_outputs,
                             void* d_weights, int64_t rows, int64_t width, cudaStream_t stream) {
  if (rows == 0 || (d_outputs == nullptr && d_weights == nullptr)) return cudaSuccess;
  if (kind == HalfKind::BFloat16) {
    return fp32_weights ? launch_combine_backward<__nv_bfloat16, float>(grad, outputs, weights, tokens, order,
                                                                         d_outputs, d_weights, rows, width, stream)
                        : launch_combine_backward<__nv_bfloat16, __nv_bfloat16>(
                              grad, outputs, weights, tokens, order, d_outputs, d_weights, rows, width, stream);
  }
  return fp32_weights ? launch_combine_backward<__half, float>(grad, outputs, weights, tokens, order, d_outputs,
                                                                d_weights, rows, width, stream)
                      : launch_combine_backward<__half, __half>(grad, outputs, weights, tokens, order, d_outputs,
                                                                 d_weights, rows, width, stream);
}

}  // namespace finetune::cuda_kernels
