#include "finetune/model/fused_kernels.h"

// CUDA builds implement these in cuda/fused_kernels.cpp.
#ifndef FINETUNE_WITH_CUDA
#include "finetune/util/errors.h"

namespace finetune {

at::Tensor fused_rope(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  throw Error("fused_rope: this build has no CUDA kernels");
}

bool fused_norm_rope_supported(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }

at::Tensor fused_norm_rope(const at::Tensor&, const at::Tensor&, double, const at::Tensor&, const at::Tensor&) {
  throw Error("fused_norm_rope: this build has no CUDA kernels");
}

bool fused_swiglu_supported(const at::Tensor&, const at::Tensor&) { return false; }

at::Tensor fused_swiglu(const at::Tensor&, const at::Tensor&) {
  throw Error("fused_swiglu: this build has no CUDA kernels");
}

void fused_swiglu_into(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  throw Error("fused_swiglu_into: this build has no CUDA kernels");
}

void fused_swiglu_backward_in_place(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  throw Error("fused_swiglu_backward_in_place: this build has no CUDA kernels");
}

at::Tensor fused_swiglu_gate_up(const at::Tensor&, int64_t) {
  throw Error("fused_swiglu_gate_up: this build has no CUDA kernels");
}

}  // namespace finetune
#endif
