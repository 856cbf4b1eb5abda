// Fused RoPE and SwiGLU kernels (SwiGLU on separate gate and up tensors, and on one packed gate_up
// tensor read in place). Every intermediate that HF's bf16/fp16 graph materialises is
// rounded to the element type here too (`round_to`), so the results equal ATen's op-by-op ones:
// ATen computes each elementwise op in fp32 and rounds its output. The SwiGLU kernels also run
// fp32 tensors, where every rounding is the identity (ATen's fp32 kernels compute the same fp32
// expressions).
#include "elementwise_kernels.h"

#include <cstdint>

#include "finetune/kernels/half_precision.cuh"

namespace finetune::cuda_kernels {
namespace {

constexpr int kThreads = 256;

int64_t blocks_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

// One thread per `Width` consecutive rotated pairs (i, i + D/2) of one token and head.
//   forward:  y1 = x1 c1 + (-x2) s1,      y2 = x2 c2 + x1 s2
//   backward (autograd of the same graph): dx1 = g1 c1 + g2 s2,  dx2 = g2 c2 - g1 s1
template <typename T, int Width>
__global__ void rope_kernel(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin,
                            T* __restrict__ y, int64_t tokens, int64_t heads, int64_t half_dim, bool backward) {
  RowChunk chunk;  // rows: token * heads + head; columns: the first half of the head dimension
  if (!thread_row_chunk<Width>(tokens * heads, half_dim, chunk)) return;
  const int64_t i = chunk.column;
  const int64_t row = chunk.row;
  const int64_t token = row / heads;
  const int64_t dim = 2 * half_dim;
  const int64_t base = row * dim;
  const int64_t table = token * dim;
  const auto x1 = load<T, Width>(x + base + i), x2 = load<T, Width>(x + base + i + half_dim);
  const auto c1 = load<T, Width>(cos + table + i), c2 = load<T, Width>(cos + table + i + half_dim);
  const auto s1 = load<T, Width>(sin + table + i), s2 = load<T, Width>(sin + table + i + half_dim);
  Pack<T> y1, y2;
#pragma unroll
  for (int k = 0; k < Width; ++k) {
    const float a1 = to_float(x1.v[k]), a2 = to_float(x2.v[k]);
    float r1, r2;
    if (!backward) {
      r1 = round_to<T>(a1 * to_float(c1.v[k])) + round_to<T>(-a2 * to_float(s1.v[k]));
      r2 = round_to<T>(a2 * to_float(c2.v[k])) + round_to<T>(a1 * to_float(s2.v[k]));
    } else {
      r1 = round_to<T>(a1 * to_float(c1.v[k])) + round_to<T>(a2 * to_float(s2.v[k]));
      r2 = round_to<T>(a2 * to_float(c2.v[k])) - round_to<T>(a1 * to_float(s1.v[k]));
    }
    y1.v[k] = from_float<T>(r1);
    y2.v[k] = from_float<T>(r2);
  }
  store<T, Width>(y + base + i, y1);
  store<T, Width>(y + base + i + half_dim, y2);
}

// silu(g) = g / (1 + exp(-g)), as ATen's kernel computes it in fp32.
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// One element of silu(gate) * up: the activation rounded as ATen's silu writes it, times up, rounded.
// Every SwiGLU kernel below computes its elements here, so the contiguous and the packed (gate_up)
// layouts give the same bits.
template <typename T>
__device__ __forceinline__ T swiglu_value(T gate, T up) {
  return from_float<T>(round_to<T>(silu(to_float(gate))) * to_float(up));
}

// One element's gradients from the output gradient dy: d_up = dy * silu(g) (rounded as the
// forward's activation was); d_gate = silu'(g) * (dy * up), silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g)))
// as ATen's silu_backward.
template <typename T>
__device__ __forceinline__ void swiglu_gradients(T dy, T gate, T up, T& d_gate, T& d_up) {
  const float g = to_float(gate);
  const float grad = to_float(dy);
  d_up = from_float<T>(grad * round_to<T>(silu(g)));
  const float d_activation = round_to<T>(grad * to_float(up));
  const float sigmoid = 1.0f / (1.0f + expf(-g));
  d_gate = from_float<T>(d_activation * sigmoid * (1.0f + g * (1.0f - sigmoid)));
}

// One thread per `Width` consecutive elements (a pack, or one element).
template <typename T, int Width>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out,
                                      int64_t n) {
  const int64_t index = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * Width;
  if (index >= n) return;
  const auto g = load<T, Width>(gate + index), u = load<T, Width>(up + index);
  Pack<T> o;
#pragma unroll
  for (int k = 0; k < Width; ++k) o.v[k] = swiglu_value<T>(g.v[k], u.v[k]);
  store<T, Width>(out + index, o);
}

// d_gate and d_up of the `Width` elements at `index`, from the output gradient, gate and up there.
template <typename T, int Width>
__device__ __forceinline__ void swiglu_backward_pack(const T* grad, const T* gate, const T* up, int64_t index,
                                                     Pack<T>& dg, Pack<T>& du) {
  const auto dy = load<T, Width>(grad + index), g = load<T, Width>(gate + index), u = load<T, Width>(up + index);
#pragma unroll
  for (int k = 0; k < Width; ++k) swiglu_gradients<T>(dy.v[k], g.v[k], u.v[k], dg.v[k], du.v[k]);
}

template <typename T, int Width>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate,
                                       const T* __restrict__ up, T* __restrict__ d_gate, T* __restrict__ d_up,
                                       int64_t n) {
  const int64_t index = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * Width;
  if (index >= n) return;
  Pack<T> dg, du;
  swiglu_backward_pack<T, Width>(grad, gate, up, index, dg, du);
  store<T, Width>(d_gate + index, dg);
  store<T, Width>(d_up + index, du);
}

// The same gradients written over their inputs, d_gate into gate and d_up into up (no __restrict__
// on the two: they are read and written). Each thread loads its elements before it stores to them,
// and no other thread reads or writes them.
template <typename T, int Width>
__global__ void swiglu_backward_in_place_kernel(const T* __restrict__ grad, T* gate, T* up, int64_t n) {
  const int64_t index = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * Width;
  if (index >= n) return;
  Pack<T> dg, du;
  swiglu_backward_pack<T, Width>(grad, gate, up, index, dg, du);
  store<T, Width>(gate + index, dg);
  store<T, Width>(up + index, du);
}

// The packed layout: row r of gate_up starts r * row_stride elements in, its gate in columns
// [0, width) and its up in [width, 2 width). One thread per `Width` consecutive columns of a row;
// out (rows, width) contiguous.
template <typename T, int Width>
__global__ void swiglu_gate_up_forward_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t rows,
                                              int64_t width, int64_t row_stride) {
  RowChunk chunk;
  if (!thread_row_chunk<Width>(rows, width, chunk)) return;
  const int64_t row = chunk.row, column = chunk.column;
  const T* gate = gate_up + row * row_stride + column;
  const auto g = load<T, Width>(gate), u = load<T, Width>(gate + width);
  Pack<T> o;
#pragma unroll
  for (int k = 0; k < Width; ++k) o.v[k] = swiglu_value<T>(g.v[k], u.v[k]);
  store<T, Width>(out + row * width + column, o);
}

// grad (rows, width) contiguous -> d_gate_up (rows, 2 width) contiguous: each row's d_gate, then its d_up.
template <typename T, int Width>
__global__ void swiglu_gate_up_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate_up,
                                               T* __restrict__ d_gate_up, int64_t rows, int64_t width,
                                               int64_t row_stride) {
  RowChunk chunk;
  if (!thread_row_chunk<Width>(rows, width, chunk)) return;
  const int64_t row = chunk.row, column = chunk.column;
  const T* gate = gate_up + row * row_stride + column;
  const auto dy = load<T, Width>(grad + row * width + column);
  const auto g = load<T, Width>(gate), u = load<T, Width>(gate + width);
  Pack<T> dg, du;
#pragma unroll
  for (int k = 0; k < Width; ++k) swiglu_gradients<T>(dy.v[k], g.v[k], u.v[k], dg.v[k], du.v[k]);
  T* d_gate = d_gate_up + row * 2 * width + column;
  store<T, Width>(d_gate, dg);
  store<T, Width>(d_gate + width, du);
}

template <typename T>
cudaError_t launch_rope(const void* x, const void* cos, const void* sin, void* y, int64_t tokens, int64_t heads,
                        int64_t head_dim, bool backward, cudaStream_t stream) {
  const int64_t half_dim = head_dim / 2;
  if (tokens * heads * half_dim == 0) return cudaSuccess;
  const auto* x_ = static_cast<const T*>(x);
  const auto* cos_ = static_cast<const T*>(cos);
  const auto* sin_ = static_cast<const T*>(sin);
  auto* y_ = static_cast<T*>(y);
  if (half_dim % kPack == 0 && aligned16(x) && aligned16(cos) && aligned16(sin) && aligned16(y)) {
    rope_kernel<T, kPack><<<blocks_for(tokens * heads * half_dim / kPack), kThreads, 0, stream>>>(
        x_, cos_, sin_, y_, tokens, heads, half_dim, backward);
  } else {
    rope_kernel<T, 1><<<blocks_for(tokens * heads * half_dim), kThreads, 0, stream>>>(x_, cos_, sin_, y_, tokens,
                                                                                       heads, half_dim, backward);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_swiglu_forward(const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream) {
  const auto* g = static_cast<const T*>(gate);
  const auto* u = static_cast<const T*>(up);
  auto* o = static_cast<T*>(out);
  if (n % kPack == 0 && aligned16(gate) && aligned16(up) && aligned16(out)) {
    swiglu_forward_kernel<T, kPack><<<blocks_for(n / kPack), kThreads, 0, stream>>>(g, u, o, n);
  } else {
    swiglu_forward_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(g, u, o, n);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_swiglu_backward(const void* grad, const void* gate, const void* up, void* d_gate, void* d_up,
                                   int64_t n, cudaStream_t stream) {
  const auto* dy = static_cast<const T*>(grad);
  const auto* g = static_cast<const T*>(gate);
  const auto* u = static_cast<const T*>(up);
  auto* dg = static_cast<T*>(d_gate);
  auto* du = static_cast<T*>(d_up);
  if (n % kPack == 0 && aligned16(grad) && aligned16(gate) && aligned16(up) && aligned16(d_gate) && aligned16(d_up)) {
    swiglu_backward_kernel<T, kPack><<<blocks_for(n / kPack), kThreads, 0, stream>>>(dy, g, u, dg, du, n);
  } else {
    swiglu_backward_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(dy, g, u, dg, du, n);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_swiglu_backward_in_place(const void* grad, void* gate, void* up, int64_t n, cudaStream_t stream) {
  const auto* dy = static_cast<const T*>(grad);
  auto* g = static_cast<T*>(gate);
  auto* u = static_cast<T*>(up);
  if (n % kPack == 0 && aligned16(grad) && aligned16(gate) && aligned16(up)) {
    swiglu_backward_in_place_kernel<T, kPack><<<blocks_for(n / kPack), kThreads, 0, stream>>>(dy, g, u, n);
  } else {
    swiglu_backward_in_place_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(dy, g, u, n);
  }
  return cudaGetLastError();
}

// The 16-byte path needs whole packs in every row and every row start (gate's and up's) aligned.
template <typename T>
cudaError_t launch_swiglu_gate_up_forward(const void* gate_up, void* out, int64_t rows, int64_t width,
                                          int64_t row_stride, cudaStream_t stream) {
  const auto* gu = static_cast<const T*>(gate_up);
  auto* o = static_cast<T*>(out);
  if (width % kPack == 0 && row_stride % kPack == 0 && aligned16(gate_up) && aligned16(out)) {
    swiglu_gate_up_forward_kernel<T, kPack><<<blocks_for(rows * width / kPack), kThreads, 0, stream>>>(
        gu, o, rows, width, row_stride);
  } else {
    swiglu_gate_up_forward_kernel<T, 1><<<blocks_for(rows * width), kThreads, 0, stream>>>(gu, o, rows, width,
                                                                                           row_stride);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_swiglu_gate_up_backward(const void* grad, const void* gate_up, void* d_gate_up, int64_t rows,
                                           int64_t width, int64_t row_stride, cudaStream_t stream) {
  const auto* dy = static_cast<const T*>(grad);
  const auto* gu = static_cast<const T*>(gate_up);
  auto* d = static_cast<T*>(d_gate_up);
  if (width % kPack == 0 && row_stride % kPack == 0 && aligned16(grad) && aligned16(gate_up) && aligned16(d_gate_up)) {
    swiglu_gate_up_backward_kernel<T, kPack><<<blocks_for(rows * width / kPack), kThreads, 0, stream>>>(
        dy, gu, d, rows, width, row_stride);
  } else {
    swiglu_gate_up_backward_kernel<T, 1><<<blocks_for(rows * width), kThreads, 0, stream>>>(dy, gu, d, rows, width,
                                                                                            row_stride);
  }
  return cudaGetLastError();
}

template <typename T>
struct TypeTag {
  using type = T;
};

// launch(TypeTag<T>{}) for the element type of `kind`: the SwiGLU launchers run fp32 as well.
template <typename Launch>
cudaError_t with_swiglu_type(HalfKind kind, Launch&& launch) {
  switch (kind) {
    case HalfKind::BFloat16: return launch(TypeTag<__nv_bfloat16>{});
    case HalfKind::Float16: return launch(TypeTag<__half>{});
    case HalfKind::Float32: return launch(TypeTag<float>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t rope(HalfKind kind, const void* x, const void* cos, const void* sin, void* y, int64_t tokens,
                 int64_t heads, int64_t head_dim, bool backward, cudaStream_t stream) {
  return kind == HalfKind::BFloat16
             ? launch_rope<__nv_bfloat16>(x, cos, sin, y, tokens, heads, head_dim, backward, stream)
             : launch_rope<__half>(x, cos, sin, y, tokens, heads, head_dim, backward, stream);
}

cudaError_t swiglu_forward(HalfKind kind, const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_swiglu_type(kind, [&](auto tag) {
    return launch_swiglu_forward<typename decltype(tag)::type>(gate, up, out, n, stream);
  });
}

cudaError_t swiglu_backward(HalfKind kind, const void* grad, const void* gate, const void* up, void* d_gate,
                            void* d_up, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_swiglu_type(kind, [&](auto tag) {
    return launch_swiglu_backward<typename decltype(tag)::type>(grad, gate, up, d_gate, d_up, n, stream);
  });
}

cudaError_t swiglu_backward_in_place(HalfKind kind, const void* grad, void* gate, void* up, int64_t n,
                                     cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_swiglu_type(kind, [&](auto tag) {
    return launch_swiglu_backward_in_place<typename decltype(tag)::type>(grad, gate, up, n, stream);
  });
}

cudaError_t swiglu_gate_up_forward(HalfKind kind, const void* gate_up, void* out, int64_t rows, int64_t width,
                                   int64_t row_stride, cudaStream_t stream) {
  if (rows * width == 0) return cudaSuccess;
  return with_swiglu_type(kind, [&](auto tag) {
    return launch_swiglu_gate_up_forward<typename decltype(tag)::type>(gate_up, out, rows, width, row_stride, stream);
  });
}

cudaError_t swiglu_gate_up_backward(HalfKind kind, const void* grad, const void* gate_up, void* d_gate_up,
                                    int64_t rows, int64_t width, int64_t row_stride, cudaStream_t stream) {
  if (rows * width == 0) return cudaSuccess;
  return with_swiglu_type(kind, [&](auto tag) {
    return launch_swiglu_gate_up_backward<typename decltype(tag)::type>(grad, gate_up, d_gate_up, rows, width,
                                                                         row_stride, stream);
  });
}

}  // namespace finetune::cuda_kernels
