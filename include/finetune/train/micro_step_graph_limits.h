// The limits of graphed micro-steps (Note [Graphed micro-steps] in micro_step_graphs.h), LibTorch-free
// so that --cuda_graphs' help text (config/option_table.cpp) reads them instead of repeating them.
#pragma once

#include <cstdint>

namespace finetune {

// Rows padded beyond this many tokens run eagerly. A full packed row of max_seq_length 2048 pads
// to 2304 (its filler token): eager, where a GPU-bound row loses nothing to the host and would lose
// 12.5% to the padding (Qwen3-8B, packed 1 x 2048, one H100: 9,259 tok/s graphed; 9,768 eager in an
// earlier session).
inline constexpr int64_t kCudaGraphMaxTokens = 2048;
// Shapes first seen after this many captures run eagerly (memory, capture time).
inline constexpr int64_t kCudaGraphMaxShapes = 64;
// Note [Capture ahead] (micro_step_graphs.h): the shapes of this many coming steps are captured
// together after the warm-up.
inline constexpr int64_t kCudaGraphCaptureAheadSteps = 1000;

}  // namespace finetune
