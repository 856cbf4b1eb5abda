// Fused RMSNorm + RoPE over rows of head_dim = 32 * E elements: one warp per row, E consecutive
// elements per lane, so the row's sum of squares is a warp reduction and each element's partner in
// the rotation (i and i + head_dim / 2) is in lane ^ 16. The roundings are those of the two ops
// run one after the other: the normalised row is rounded to the element type (as ATen's fused
// RMSNorm writes it: (x * rstd) * weight in fp32, rounded once), then rotated as rope_kernel
// (elementwise_kernels.cu) rotates it. Only the sum of squares' order differs from ATen's kernel.
// Backward: the transposed rotation of dy, rounded as rope_kernel's backward writes it, then
// RMSNorm's input gradient in fp32: dx = rstd * (g w - x_hat * mean(g w x_hat)), x_hat = x rstd.
#include "norm_rope_kernels.h"

#include <cstdint>
#include <type_traits>

#include "finetune/kernels/half_precision.cuh"

namespace finetune::cuda_kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Where this lane's E elements are: its warp's row of head_dim = 32 * E elements (row = token *
// heads + head), their offset in x (base) and in the cos/sin tables (table), their first column,
// and whether they are in the row's first half. False for a warp past the last row (the whole warp
// leaves together, so the shuffles see every lane).
struct LaneSpan {
  int64_t row;
  int64_t base;
  int64_t table;
  int column;
  bool first_half;
};

template <int E>
__device__ __forceinline__ bool lane_span(int64_t rows, int64_t heads, LaneSpan& span) {
  constexpr int kDim = kWarp * E;
  span.row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (span.row >= rows) return false;
  span.column = (threadIdx.x % kWarp) * E;
  span.base = span.row * kDim + span.column;
  span.table = (span.row / heads) * kDim + span.column;
  span.first_half = span.column < kDim / 2;
  return true;
}

template <typename T, int E>
__device__ __forceinline__ void load_floats(const T* p, float (&v)[E]) {
#pragma unroll
  for (int k = 0; k < E; ++k) v[k] = to_float(p[k]);
}

template <typename T, int E>
__global__ void norm_rope_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                         const T* __restrict__ cos, const T* __restrict__ sin, T* __restrict__ y,
                                         float* __restrict__ rstd, int64_t rows, int64_t heads, float eps) {
  constexpr int kDim = kWarp * E;
  LaneSpan span;
  if (!lane_span<E>(rows, heads, span)) return;
  float v[E];
  load_floats<T, E>(x + span.base, v);
  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < E; ++k) squares += v[k] * v[k];
  const float r = rsqrtf(warp_sum(squares) / kDim + eps);
  float normed[E];
#pragma unroll
  for (int k = 0; k < E; ++k) normed[k] = round_to<T>((v[k] * r) * to_float(weight[span.column + k]));
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const float partner = __shfl_xor_sync(kFullMask, normed[k], kWarp / 2);
    const float c = to_float(cos[span.table + k]), s = to_float(sin[span.table + k]);
    // first half: x1 c1 + (-x2) s1; second half: x2 c2 + x1 s2 (rope_kernel's forward)
    const float rotated = span.first_half ? round_to<T>(normed[k] * c) + round_to<T>(-partner * s)
                                          : round_to<T>(normed[k] * c) + round_to<T>(partner * s);
    y[span.base + k] = from_float<T>(rotated);
  }
  if (span.column == 0) rstd[span.row] = r;
}

template <typename T, int E>
__global__ void norm_rope_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                          const T* __restrict__ weight, const T* __restrict__ cos,
                                          const T* __restrict__ sin, const float* __restrict__ rstd,
                                          T* __restrict__ dx, int64_t rows, int64_t heads) {
  constexpr int kDim = kWarp * E;
  LaneSpan span;
  if (!lane_span<E>(rows, heads, span)) return;
  const float r = rstd[span.row];
  float weighted[E], x_hat[E];
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const float g = to_float(dy[span.base + k]);
    const float partner_g = __shfl_xor_sync(kFullMask, g, kWarp / 2);
    const float c = to_float(cos[span.table + k]), s = to_float(sin[span.table + k]);
    const float partner_s = __shfl_xor_sync(kFullMask, s, kWarp / 2);
    // first half: g1 c1 + g2 s2; second half: g2 c2 - g1 s1 (rope_kernel's backward), rounded
    const float unrotated = span.first_half ? round_to<T>(g * c) + round_to<T>(partner_g * partner_s)
                                            : round_to<T>(g * c) - round_to<T>(partner_g * partner_s);
    weighted[k] = round_to<T>(unrotated) * to_float(weight[span.column + k]);
    x_hat[k] = to_float(x[span.base + k]) * r;
    dot += weighted[k] * x_hat[k];
  }
  const float mean_dot = warp_sum(dot) / kDim;
#pragma unroll
  for (int k = 0; k < E; ++k) dx[span.base + k] = from_float<T>(r * (weighted[k] - x_hat[k] * mean_dot));
}

int64_t blocks_for_rows(int64_t rows) { return (rows + kWarpsPerBlock - 1) / kWarpsPerBlock; }

// Calls f with std::integral_constant<int, E> for head_dim = 32 * E.
template <typename F>
cudaError_t with_lane_width(int64_t head_dim, F&& f) {
  switch (head_dim) {
    case 64: return f(std::integral_constant<int, 2>{});
    case 128: return f(std::integral_constant<int, 4>{});
    case 256: return f(std::integral_constant<int, 8>{});
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t launch_forward(const void* x, const void* weight, const void* cos, const void* sin, void* y, float* rstd,
                           int64_t rows, int64_t heads, int64_t head_dim, float eps, cudaStream_t stream) {
  return with_lane_width(head_dim, [&](auto width) {
    constexpr int E = decltype(width)::value;
    norm_rope_forward_kernel<T, E><<<blocks_for_rows(rows), kWarp * kWarpsPerBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(cos),
        static_cast<const T*>(sin), static_cast<T*>(y), rstd, rows, heads, eps);
    return cudaGetLastError();
  });
}

template <typename T>
cudaError_t launch_backward(const void* dy, const void* x, const void* weight, const void* cos, const void* sin,
                            const float* rstd, void* dx, int64_t rows, int64_t heads, int64_t head_dim,
                            cudaStream_t stream) {
  return with_lane_width(head_dim, [&](auto width) {
    constexpr int E = decltype(width)::value;
    norm_rope_backward_kernel<T, E><<<blocks_for_rows(rows), kWarp * kWarpsPerBlock, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(weight),
        static_cast<const T*>(cos), static_cast<const T*>(sin), rstd, static_cast<T*>(dx), rows, heads);
    return cudaGetLastError();
  });
}

}  // namespace

bool norm_rope_head_dim_supported(int64_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

cudaError_t norm_rope_forward(HalfKind kind, const void* x, const void* weight, const void* cos, const void* sin,
                              void* y, float* rstd, int64_t tokens, int64_t heads, int64_t head_dim, float eps,
                              cudaStream_t stream) {
  const int64_t rows = tokens * heads;
  if (rows == 0) return cudaSuccess;
  return kind == HalfKind::BFloat16
             ? launch_forward<__nv_bfloat16>(x, weight, cos, sin, y, rstd, rows, heads, head_dim, eps, stream)
             : launch_forward<__half>(x, weight, cos, sin, y, rstd, rows, heads, head_dim, eps, stream);
}

cudaError_t norm_rope_backward(HalfKind kind, const void* dy, const void* x, const void* weight, const void* cos,
                               const void* sin, const float* rstd, void* dx, int64_t tokens, int64_t heads,
                               int64_t head_dim, cudaStream_t stream) {
  const int64_t rows = tokens * heads;
  if (rows == 0) return cudaSuccess;
  return kind == HalfKind::BFloat16
             ? launch_backward<__nv_bfloat16>(dy, x, weight, cos, sin, rstd, dx, rows, heads, head_dim, stream)
             : launch_backward<__half>(dy, x, weight, cos, sin, rstd, dx, rows, heads, head_dim, stream);
}

}  // namespace finetune::cuda_kernels
