// `finetune --version`. FINETUNE_VERSION comes from CMake's project(VERSION) (CMakeLists.txt, set on
// this file alone, so a version bump recompiles only it).
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#include "finetune/commands/commands.h"

#ifndef FINETUNE_VERSION
#error "FINETUNE_VERSION must be defined by the build (CMakeLists.txt)"
#endif

namespace finetune {
namespace {

// "12.8" from CUDART_VERSION 12080, as LibTorch reports the CUDA runtime it was compiled against;
// empty when LibTorch has no CUDA library (a CPU build).
std::string libtorch_cuda_version() {
  try {
    const long version = at::detail::getCUDAHooks().versionCUDART();
    return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

std::string version_text() {
  const std::string cuda = libtorch_cuda_version();
#ifdef FINETUNE_WITH_CUDA
  const std::string kernels = "finetune's CUDA kernels and NCCL: built in";
#else
  const std::string kernels = "finetune's CUDA kernels and NCCL: not built";
#endif
  return std::string("finetune ") + FINETUNE_VERSION + "\n" + "LibTorch " + TORCH_VERSION + ", " +
         (cuda.empty() ? "CPU only" : "CUDA " + cuda) + "\n" + kernels + "\n";
}

}  // namespace finetune
