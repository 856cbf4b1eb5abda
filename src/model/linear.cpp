#include "finetune/model/linear.h"

#include "finetune/model/quantized_linear.h"
#include "finetune/quant/nf4.h"

namespace finetune {

int64_t Linear::in_features() const { return is_4bit() ? weight_4bit->shape[1] : weight.size(1); }

int64_t Linear::out_features() const { return is_4bit() ? weight_4bit->shape[0] : weight.size(0); }

at::Tensor Linear::dense_weight() const {
  if (!is_4bit()) return weight;
  return dequantize_nf4(*weight_4bit, compute_dtype);
}

at::Tensor Linear::base_forward(const at::Tensor& x) const {
  if (is_4bit()) return linear_4bit(x, *this);
  return at::linear(x, weight, bias);
}

}  // namespace finetune
