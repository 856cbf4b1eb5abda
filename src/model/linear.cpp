#include "finetune/model/linear.h"

#include "finetune/lora/half_precision_lora_linear.h"

namespace finetune {

at::Tensor linear_forward(const Linear& layer, const at::Tensor& x, bool training) {
  if (!layer.lora) return at::linear(x, layer.weight, layer.bias);
  if (use_half_precision_lora(x, *layer.lora, training)) {
    return half_precision_lora_linear(x, layer.weight, layer.bias, *layer.lora);
  }
  auto result = at::linear(x, layer.weight, layer.bias);
  // As PEFT: the adapter runs in fp32, the sum is promoted, then cast back to the base dtype.
  const auto result_dtype = result.scalar_type();
  return (result + lora_delta(*layer.lora, x, training)).to(result_dtype);
}

}  // namespace finetune
