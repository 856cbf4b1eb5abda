#include "finetune/lora/lora_kernels.h"

#include "finetune/util/errors.h"

#ifdef FINETUNE_WITH_CUDA
#include "finetune/kernels/kernel_launch.h"
#include "cuda/lora_split_kernel.h"
#endif

namespace finetune {

at::Tensor split_hi_lo(const at::Tensor& t, at::ScalarType dtype, int64_t dim) {
  auto hi = t.to(dtype);
  return at::cat({hi, (t - hi).to(dtype)}, dim);  // t - hi is formed in fp32
}

at::Tensor sum_halves(const at::Tensor& product, int64_t dim) {
  const int64_t half = product.size(dim) / 2;
  return product.narrow(dim, 0, half) + product.narrow(dim, half, half);
}

at::Tensor scaled_sum_split(const at::Tensor& product, double scaling, at::ScalarType dtype, bool cuda_kernel) {
  if (cuda_kernel) {
#ifdef FINETUNE_WITH_CUDA
    if (!product.is_cuda() || product.scalar_type() != at::kFloat) {
      throw Error("scaled_sum_split: the CUDA kernel takes an fp32 CUDA product, got " + product.toString());
    }
    const auto input = product.contiguous();
    auto out = at::empty(product.sizes(), product.options().dtype(dtype));
    cuda_kernels::check_launch(
        cuda_kernels::lora_scaled_sum_split(input.data_ptr<float>(), out.data_ptr(), input.size(0),
                                            input.size(1) / 2, static_cast<float>(scaling),
                                            cuda_kernels::half_kind(out), cuda_kernels::current_stream(input)),
        "lora_scaled_sum_split");
    return out;
#else
    throw Error("scaled_sum_split: this build has no CUDA kernels");
#endif
  }
  return split_hi_lo(sum_halves(product, 1) * scaling, dtype, 1);
}

}  // namespace finetune
