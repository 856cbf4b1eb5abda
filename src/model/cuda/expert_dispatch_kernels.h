// Launchers of the expert dispatch kernels (expert_dispatch_kernels.cu, Note [Gathered expert
// dispatch] in model/expert_dispatch.h): plain CUDA, no ATen. Pointers are device pointers of
// contiguous tensors; `kind` selects the rows' element type and `fp32_weights` whether the weights
// are fp32 or of that type. Indices are int64. Each returns the launch's cudaError_t.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "finetune/kernels/half_kind.h"

namespace finetune::cuda_kernels {

// out[r, :] = sum_{j<k} weights[r*k + j] * src[index[r*k + j], :] for r < rows, width columns;
// weights null: all ones. fp32 accumulation, rounded once.
cudaError_t gathered_row_sum(HalfKind kind, bool fp32_weights, const void* src, const int64_t* index,
                             const void* weights, void* out, int64_t rows, int64_t top_k, int64_t width,
                             cudaStream_t stream);

// For each sorted row i < rows: d_outputs[i, :] = weights[order[i]] * grad[tokens[i], :] (rounded
// once) and d_weights[order[i]] = <grad[tokens[i], :], outputs[i, :]> (fp32 sum, rounded once to
// the weights' type); either output may be null (not computed).
cudaError_t combine_backward(HalfKind kind, bool fp32_weights, const void* grad, const void* outputs,
                             const void* weights, const int64_t* tokens, const int64_t* order, void* d_outputs,
                             void* d_weights, int64_t rows, int64_t width, cudaStream_t stream);

}  // namespace finetune::cuda_kernels
