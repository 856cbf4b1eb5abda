// grouped_gemms_sync_free (model/expert_gemms.h) in CUDA builds: what the device is.
#include "finetune/model/expert_gemms.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>

namespace finetune {

bool grouped_gemms_sync_free(const at::Device& device) {
  if (!device.is_cuda()) return false;
  const auto index = device.has_index() ? device.index() : c10::cuda::current_device();
  const int major = at::cuda::getDeviceProperties(index)->major;
  // ATen's _grouped_mm: the bf16 CUTLASS kernels on sm90 and sm100, the host-side fallback elsewhere.
  return major == 9 || major == 10;
}

}  // namespace finetune
