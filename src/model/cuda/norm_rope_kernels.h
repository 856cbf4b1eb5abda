// Launchers of the fused RMSNorm + RoPE kernels (norm_rope_kernels.cu) for the per-head query and
// key norms of Qwen3-style attention: plain CUDA, no ATen. x, y, grads (rows = tokens * heads,
// head_dim) contiguous; weight (head_dim); cos/sin (tokens, head_dim); rstd (rows) fp32. head_dim
// is 64, 128 or 256 (norm_rope_head_dim_supported). `kind`: bf16 or fp16. Each returns the
// launch's cudaError_t.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "finetune/kernels/half_kind.h"

namespace finetune::cuda_kernels {

bool norm_rope_head_dim_supported(int64_t head_dim);

// y = rope(rms_norm(x) * weight), rstd = the rows' 1 / sqrt(mean(x^2) + eps).
cudaError_t norm_rope_forward(HalfKind kind, const void* x, const void* weight, const void* cos, const void* sin,
                              void* y, float* rstd, int64_t tokens, int64_t heads, int64_t head_dim, float eps,
                              cudaStream_t stream);

// From y's gradient dy: x's gradient dx (the weight is frozen: no weight gradient).
cudaError_t norm_rope_backward(HalfKind kind, const void* dy, const void* x, const void* weight, const void* cos,
                               const void* sin, const float* rstd, void* dx, int64_t tokens, int64_t heads,
                               int64_t head_dim, cudaStream_t stream);

}  // namespace finetune::cuda_kernels
