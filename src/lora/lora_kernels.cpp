#include "finetune/lora/lora_kernels.h"

#ifdef FINETUNE_WITH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "cuda/lora_split_kernel.h"
#include "finetune/util/errors.h"
#endif

namespace finetune {

at::Tensor scaled_sum_split(const at::Tensor& product, double scaling, at::ScalarType dtype) {
  const int64_t r = product.size(1) / 2;
#ifdef FINETUNE_WITH_CUDA
  if (product.is_cuda() && product.is_contiguous() && product.scalar_type() == at::kFloat &&
      (dtype == at::kBFloat16 || dtype == at::kHalf)) {
    auto out = at::empty(product.sizes(), product.options().dtype(dtype));
    const auto stream = c10::cuda::getCurrentCUDAStream(product.device().index()).stream();
    const auto status = cuda_kernels::lora_scaled_sum_split(product.data_ptr<float>(), out.data_ptr(), product.size(0), r,
                                                            static_cast<float>(scaling), dtype == at::kBFloat16, stream);
    if (status != cudaSuccess) {
      throw Error(std::string("lora_scaled_sum_split kernel launch failed: ") + cudaGetErrorString(status));
    }
    return out;
  }
#endif
  auto value = (product.narrow(1, 0, r) + product.narrow(1, r, r)) * scaling;
  auto hi = value.to(dtype);
  return at::cat({hi, (value - hi).to(dtype)}, 1);  // value - hi is formed in fp32
}

}  // namespace finetune
