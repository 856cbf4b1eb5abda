// Shared by the quant module's ATen-side launchers (CUDA builds): the kernels' element type of a
// tensor, and the check that a tensor is contiguous on the device the kernel runs on.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "element_kind.h"
#include "finetune/util/errors.h"

namespace finetune::cuda_kernels {

inline ElementKind element_kind(at::ScalarType type, const char* what) {
  switch (type) {
    case at::kFloat: return ElementKind::Float32;
    case at::kBFloat16: return ElementKind::BFloat16;
    case at::kHalf: return ElementKind::Float16;
    default: throw Error(std::string(what) + ": expected fp32, bf16 or fp16, got " + std::string(c10::toString(type)));
  }
}

inline void check_contiguous_on(const at::Tensor& t, const at::Device& device, const char* what) {
  if (!t.is_contiguous() || t.device() != device) {
    throw Error(std::string(what) + " must be contiguous on " + device.str() + ", got " + t.toString() + " on " +
                t.device().str());
  }
}

}  // namespace finetune::cuda_kernels
