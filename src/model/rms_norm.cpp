#include "finetune/model/rms_norm.h"

namespace finetune {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const auto input_dtype = x.scalar_type();
  auto hidden = x.to(at::kFloat);
  auto variance = hidden.pow(2).mean(-1, /*keepdim=*/true);
  hidden = hidden * at::rsqrt(variance + eps);
  return weight * hidden.to(input_dtype);
}

}  // namespace finetune
