// The element type a fused kernel launcher runs on (plain C++, shared by the .cu launchers and
// their ATen callers).
#pragma once

namespace finetune::cuda_kernels {

enum class HalfKind { BFloat16, Float16 };

}  // namespace finetune::cuda_kernels
