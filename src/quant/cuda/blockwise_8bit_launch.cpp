// ATen side of the blockwise 8-bit kernel (CUDA builds only): checks, the launch on the tensor's
// current stream, errors as exceptions.
#include "../blockwise_8bit_cuda.h"

#include <c10/cuda/CUDAGuard.h>

#include "blockwise_8bit_kernels.h"
#include "finetune/kernels/kernel_launch.h"
#include "launch_checks.h"

namespace finetune::quant_cuda {

void quantize_blockwise(const at::Tensor& A, const at::Tensor& code, int64_t blocksize, Rule8bit rule,
                        at::Tensor& codes, at::Tensor& absmax) {
  using namespace cuda_kernels;
  check_contiguous_on(A, A.device(), "quantize_blockwise: A");
  check_contiguous_on(code, A.device(), "quantize_blockwise: code");
  check_contiguous_on(codes, A.device(), "quantize_blockwise: codes");
  check_contiguous_on(absmax, A.device(), "quantize_blockwise: absmax");
  const c10::cuda::CUDAGuard guard(A.device());
  const auto nearest = rule == Rule8bit::CpuTable ? Nearest8bit::CpuTable : Nearest8bit::CudaSearch;
  check_launch(quantize_blockwise_8bit(element_kind(A.scalar_type(), "quantize_blockwise"), A.data_ptr(),
                                       code.data_ptr<float>(), absmax.data_ptr<float>(), codes.data_ptr<uint8_t>(),
                                       A.numel(), blocksize, nearest, current_stream(A)),
               "quantize_blockwise_8bit");
}

}  // namespace finetune::quant_cuda
