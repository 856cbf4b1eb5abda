// Launchers of the fused elementwise kernels (elementwise_kernels.cu): plain CUDA, no ATen, so
// nvcc compiles them quickly. Pointers are device pointers of contiguous tensors (the packed
// SwiGLU input: rows `row_stride` elements apart); `kind` selects the element type: bf16 or fp16,
// and fp32 as well for SwiGLU. Each returns the launch's cudaError_t.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "finetune/kernels/half_kind.h"

namespace finetune::cuda_kernels {

// y = (x * cos) + (rotate_half(x) * sin) for x (tokens, heads, head_dim) and cos/sin
// (tokens, head_dim); with `backward`, x is the output gradient and y the input gradient.
cudaError_t rope(HalfKind kind, const void* x, const void* cos, const void* sin, void* y, int64_t tokens,
                 int64_t heads, int64_t head_dim, bool backward, cudaStream_t stream);

// out = silu(gate) * up, n elements.
cudaError_t swiglu_forward(HalfKind kind, const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream);

// From the output gradient: d_gate and d_up of silu(gate) * up, n elements.
cudaError_t swiglu_backward(HalfKind kind, const void* grad, const void* gate, const void* up, void* d_gate,
                            void* d_up, int64_t n, cudaStream_t stream);

// swiglu_backward's gradients written over gate (d_gate) and up (d_up), n elements.
cudaError_t swiglu_backward_in_place(HalfKind kind, const void* grad, void* gate, void* up, int64_t n,
                                     cudaStream_t stream);

// The same SwiGLU on a packed gate_up (rows, 2 * width), read in place: row r starts r * row_stride
// elements in, gate in its first `width` columns and up in the next `width`. out (rows, width).
cudaError_t swiglu_gate_up_forward(HalfKind kind, const void* gate_up, void* out, int64_t rows, int64_t width,
                                   int64_t row_stride, cudaStream_t stream);

// From the output gradient (rows, width): d_gate_up (rows, 2 * width), each row's d_gate in its
// first `width` columns and its d_up in the next `width`, written by one kernel.
cudaError_t swiglu_gate_up_backward(HalfKind kind, const void* grad, const void* gate_up, void* d_gate_up,
                                    int64_t rows, int64_t width, int64_t row_stride, cudaStream_t stream);

}  // namespace finetune::cuda_kernels
