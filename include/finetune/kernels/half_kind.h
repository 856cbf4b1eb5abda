// The element type a fused kernel launcher runs on (plain C++, shared by the .cu launchers and
// their ATen callers): bf16 or fp16, and fp32 for the launchers that say they take it (SwiGLU,
// model/cuda/elementwise_kernels.h). The others run anything but BFloat16 as Float16, so their
// callers pass only the half types.
#pragma once

namespace finetune::cuda_kernels {

enum class HalfKind { BFloat16, Float16, Float32 };

}  // namespace finetune::cuda_kernels
