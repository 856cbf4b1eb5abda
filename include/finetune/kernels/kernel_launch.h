// Host-side helpers for calling the fused kernels' launchers from ATen code: the element type of
// a tensor, the current stream of its device, and a launch status turned into an exception.
#pragma once

#include <string>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "finetune/util/errors.h"
#include "finetune/kernels/half_kind.h"

namespace finetune::cuda_kernels {

inline HalfKind half_kind(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat) return HalfKind::Float32;
  return t.scalar_type() == at::kBFloat16 ? HalfKind::BFloat16 : HalfKind::Float16;
}

inline cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

inline void check_launch(cudaError_t status, const char* kernel) {
  if (status != cudaSuccess) throw Error(std::string(kernel) + " kernel launch failed: " + cudaGetErrorString(status));
}

}  // namespace finetune::cuda_kernels
