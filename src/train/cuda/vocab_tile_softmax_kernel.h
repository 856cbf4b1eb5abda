// Launcher of the fused softmax statistics of one vocabulary tile of the LM head loss
// (vocab_tile_softmax_kernel.cu; Note [Vocabulary-tiled LM head loss] in train/loss.cpp): plain
// CUDA, no ATen. Pointers are device pointers of contiguous tensors; `kind` is the logits' and
// probabilities' element type.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "finetune/kernels/half_kind.h"

namespace finetune::cuda_kernels {

// The online-softmax state of a row tile, one fp32 value per row, updated in place.
struct VocabTileRowState {
  float* running_max;   // (rows) m
  float* exp_sum;       // (rows) S = sum exp(z - m)
  float* target_logit;  // (rows) z at the row's target, once its tile has been swept
};

// One tile of `columns` vocabulary entries starting at `vocab_start`, for every row r of `logits`
// (rows, columns) in the model dtype, z its values upcast to fp32:
//   m_new = max z over the tile (first tile), else max(m_old, that);
//   probs = exp(z - m_new) rounded to the model dtype (rows, columns);
//   rescale[r] = exp(m_old - m_new) (not written for the first tile; may be null then);
//   S = sum exp(z - m_new) in fp32 (first tile), else that + S_old * rescale;
//   target_logit = z at column targets[r] - vocab_start when it lies in the tile; otherwise kept
//   (0 on the first tile). targets: (rows) int64 vocabulary ids.
// Launched on `stream`; the current device must be the tensors'.
cudaError_t vocab_tile_softmax(HalfKind kind, const void* logits, void* probs, int64_t rows, int64_t columns,
                               const int64_t* targets, int64_t vocab_start, VocabTileRowState state, float* rescale,
                               bool first, cudaStream_t stream);

}  // namespace finetune::cuda_kernels
