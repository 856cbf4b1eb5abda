// Fused RoPE and SwiGLU kernels. Every intermediate that HF's bf16/fp16 graph materialises is
// rounded to the element type here too (`round_to`), so the results equal ATen's op-by-op ones:
// ATen computes each elementwise op in fp32 and rounds its output.
#include "elementwise_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace finetune::cuda_kernels {
namespace {

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_float(from_float<T>(v)); }

constexpr int kThreads = 256;

int64_t blocks_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

// One thread per rotated pair (i, i + D/2) of one token and head.
//   forward:  y1 = x1 c1 + (-x2) s1,      y2 = x2 c2 + x1 s2
//   backward (autograd of the same graph): dx1 = g1 c1 + g2 s2,  dx2 = g2 c2 - g1 s1
template <typename T>
__global__ void rope_kernel(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin,
                            T* __restrict__ y, int64_t tokens, int64_t heads, int64_t half_dim, bool backward) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t pairs = tokens * heads * half_dim;
  if (index >= pairs) return;
  const int64_t i = index % half_dim;
  const int64_t row = index / half_dim;      // token * heads + head
  const int64_t token = row / heads;
  const int64_t dim = 2 * half_dim;
  const int64_t base = row * dim;
  const float x1 = to_float(x[base + i]), x2 = to_float(x[base + i + half_dim]);
  const float c1 = to_float(cos[token * dim + i]), c2 = to_float(cos[token * dim + i + half_dim]);
  const float s1 = to_float(sin[token * dim + i]), s2 = to_float(sin[token * dim + i + half_dim]);
  float y1, y2;
  if (!backward) {
    y1 = round_to<T>(x1 * c1) + round_to<T>(-x2 * s1);
    y2 = round_to<T>(x2 * c2) + round_to<T>(x1 * s2);
  } else {
    y1 = round_to<T>(x1 * c1) + round_to<T>(x2 * s2);
    y2 = round_to<T>(x2 * c2) - round_to<T>(x1 * s1);
  }
  y[base + i] = from_float<T>(y1);
  y[base + i + half_dim] = from_float<T>(y2);
}

// silu(g) = g / (1 + exp(-g)), as ATen's kernel computes it in fp32.
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

template <typename T>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out,
                                      int64_t n) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= n) return;
  out[index] = from_float<T>(round_to<T>(silu(to_float(gate[index]))) * to_float(up[index]));
}

// d_up = grad * silu(g) (rounded as the forward's activation was); d_gate = silu'(g) * (grad * up),
// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))) as ATen's silu_backward.
template <typename T>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate,
                                       const T* __restrict__ up, T* __restrict__ d_gate, T* __restrict__ d_up,
                                       int64_t n) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= n) return;
  const float g = to_float(gate[index]);
  const float dy = to_float(grad[index]);
  const float activation = round_to<T>(silu(g));
  d_up[index] = from_float<T>(dy * activation);
  const float d_activation = round_to<T>(dy * to_float(up[index]));
  const float sigmoid = 1.0f / (1.0f + expf(-g));
  d_gate[index] = from_float<T>(d_activation * sigmoid * (1.0f + g * (1.0f - sigmoid)));
}

template <typename T>
cudaError_t launch_rope(const void* x, const void* cos, const void* sin, void* y, int64_t tokens, int64_t heads,
                        int64_t head_dim, bool backward, cudaStream_t stream) {
  const int64_t pairs = tokens * heads * (head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  rope_kernel<T><<<blocks_for(pairs), kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(y), tokens,
      heads, head_dim / 2, backward);
  return cudaGetLastError();
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
  if (kind == HalfKind::BFloat16) {
    swiglu_forward_kernel<__nv_bfloat16><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(gate), static_cast<const __nv_bfloat16*>(up),
        static_cast<__nv_bfloat16*>(out), n);
  } else {
    swiglu_forward_kernel<__half><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const __half*>(gate), static_cast<const __half*>(up), static_cast<__half*>(out), n);
  }
  return cudaGetLastError();
}

cudaError_t swiglu_backward(HalfKind kind, const void* grad, const void* gate, const void* up, void* d_gate,
                            void* d_up, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (kind == HalfKind::BFloat16) {
    swiglu_backward_kernel<__nv_bfloat16><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(grad), static_cast<const __nv_bfloat16*>(gate),
        static_cast<const __nv_bfloat16*>(up), static_cast<__nv_bfloat16*>(d_gate), static_cast<__nv_bfloat16*>(d_up),
        n);
  } else {
    swiglu_backward_kernel<__half><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const __half*>(grad), static_cast<const __half*>(gate), static_cast<const __half*>(up),
        static_cast<__half*>(d_gate), static_cast<__half*>(d_up), n);
  }
  return cudaGetLastError();
}

}  // namespace finetune::cuda_kernels
