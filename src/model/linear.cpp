#include "finetune/model/linear.h"

namespace finetune {

at::Tensor linear_forward(const Linear& layer, const at::Tensor& x, bool training) {
  auto result = at::linear(x, layer.weight, layer.bias);
  if (!layer.lora) return result;
  // As PEFT: the adapter runs in fp32, the sum is promoted, then cast back to the base dtype.
  const auto result_dtype = result.scalar_type();
  return (result + lora_delta(*layer.lora, x, training)).to(result_dtype);
}

}  // namespace finetune
