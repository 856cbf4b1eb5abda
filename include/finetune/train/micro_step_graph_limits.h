// The limits of graphed micro-steps (Note [Graphed micro-steps] in micro_step_graphs.h), LibTorch-free
// so that --cuda_graphs' help text (config/option_table.cpp) reads them instead of repeating them.
#pragma once

#include <cstdint>

namespace finetune {

// Rows padded beyond this many tokens run eagerly.
inline constexpr int64_t kCudaGraphMaxTokens = 1024;
// Shapes first seen after this many captures run eagerly (memory, capture time).
inline constexpr int64_t kCudaGraphMaxShapes = 48;

}  // namespace finetune
