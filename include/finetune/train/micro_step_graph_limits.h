// The limits of graphed micro-steps (Note [Graphed micro-steps] in micro_step_graphs.h), LibTorch-free
// so that --cuda_graphs' help text (config/option_table.cpp) reads them instead of repeating them.
#pragma once

#include <cstdint>

namespace finetune {

// Rows padded beyond this many tokens run eagerly. A full packed row of max_seq_length 2048 fills
// the 2048 bucket exactly (train/graph_batch.h: no filler then), so it is graphed without padding.
inline constexpr int64_t kCudaGraphMaxTokens = 2048;
// A mixture-of-experts model's micro-steps are graphed up to this many tokens: routing, dispatch and
// combine issue many small kernels per layer, so the host falls behind the GPU even at 4 packed rows
// of 2048 (Qwen3-30B-A3B's shapes on an H200: ~20% of the step's wall time without kernels).
inline constexpr int64_t kCudaGraphMaxTokensSparse = 16384;
// Shapes first seen after this many captures run eagerly (memory, capture time).
inline constexpr int64_t kCudaGraphMaxShapes = 64;
// Note [Capture ahead] (micro_step_graphs.h): the shapes of this many coming steps are captured
// together after the warm-up.
inline constexpr int64_t kCudaGraphCaptureAheadSteps = 1000;

}  // namespace finetune
