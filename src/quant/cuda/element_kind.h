// The floating-point element type a quant kernel launcher reads or writes (plain C++, shared by
// the .cu launchers and their ATen callers *_launch.cpp).
#pragma once

namespace finetune::cuda_kernels {

enum class ElementKind { Float32, BFloat16, Float16 };

}  // namespace finetune::cuda_kernels
