// The base product of a 4-bit projection, x W^T + b with W dequantized from NF4 (Note [4-bit base
// weights] in linear.h), as one autograd node: forward dequantizes W into the compute dtype for
// the GEMM; backward dequantizes it again for dx = dy W instead of keeping it, as bitsandbytes'
// MatMul4Bit does. The base weight is frozen: no gradient reaches it.
#pragma once

#include <ATen/ATen.h>

namespace finetune {

struct Linear;

// x: (..., in_features) in the compute dtype -> (..., out_features); `base` must be 4-bit and
// outlive the backward pass (it is the model's own projection).
at::Tensor linear_4bit(const at::Tensor& x, const Linear& base);

}  // namespace finetune
