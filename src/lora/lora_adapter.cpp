#include "finetune/lora/lora_adapter.h"

namespace finetune {

at::Tensor lora_delta(const LoraAdapter& adapter, const at::Tensor& x, bool training) {
  auto input = x.to(adapter.lora_A.scalar_type());
  if (training && adapter.dropout > 0) input = at::dropout(input, adapter.dropout, /*train=*/true);
  return at::linear(at::linear(input, adapter.lora_A), adapter.lora_B) * adapter.scaling;
}

}  // namespace finetune
