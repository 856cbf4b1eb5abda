#include "finetune/model/device_selection.h"

#include <ATen/detail/CUDAHooksInterface.h>

#include "finetune/model/dtype_names.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {

at::Device select_device(const std::string& device_option, int local_rank) {
  const bool has_cuda = at::hasCUDA() && at::detail::getCUDAHooks().deviceCount() > 0;
  if (device_option == "cpu" || (device_option == "auto" && !has_cuda)) return at::Device(at::kCPU);
  if (!has_cuda) throw UsageError("--device: cuda requested but no CUDA device is visible");
  const int gpus = static_cast<int>(at::detail::getCUDAHooks().deviceCount());
  if (local_rank >= gpus) {
    throw Error("local rank " + std::to_string(local_rank) + " has no GPU: only " + std::to_string(gpus) +
                " visible (launch at most one process per GPU)");
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

at::ScalarType select_dtype(const std::string& dtype_option, const at::Device& device) {
  const auto name = canonical_dtype_name(dtype_option);
  if (name == "auto") return device.is_cuda() ? at::kBFloat16 : at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float32") return at::kFloat;
  throw UsageError("--dtype: expected " + join(dtype_names(), "|") + ", got \"" + dtype_option + "\"");
}

std::string dtype_string(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kFloat: return "float32";
    default: return c10::toString(dtype);
  }
}

bool is_half_precision(at::ScalarType dtype) { return dtype == at::kBFloat16 || dtype == at::kHalf; }

}  // namespace finetune
