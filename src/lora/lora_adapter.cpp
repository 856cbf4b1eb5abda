#include "finetune/lora/lora_adapter.h"

#include "finetune/lora/half_precision_lora_linear.h"
#include "finetune/model/device_selection.h"
#include "finetune/model/fused_kernels.h"

namespace finetune {

at::Tensor lora_delta(const LoraAdapter& adapter, const at::Tensor& x, bool training) {
  auto input = x.to(adapter.lora_A.scalar_type());
  if (training && adapter.dropout > 0) input = at::dropout(input, adapter.dropout, /*train=*/true);
  return at::linear(at::linear(input, adapter.lora_A), adapter.lora_B) * adapter.scaling;
}

bool LoraAdapter::uses_half_precision_path(const at::Tensor& x, bool training) const {
  // A dropout mask applies to x itself, which the one-node path never forms in fp32.
  return kernels.half_precision_lora && is_half_precision(x.scalar_type()) && !(training && dropout > 0);
}

at::Tensor LoraAdapter::forward(const Linear& base, const at::Tensor& x, bool training) const {
  if (uses_half_precision_path(x, training)) {
    return half_precision_lora_linear(x, base, *this);
  }
  auto result = base.base_forward(x);
  // As PEFT: the adapter runs in fp32, the sum is promoted, then cast back to the base dtype.
  const auto result_dtype = result.scalar_type();
  return (result + lora_delta(*this, x, training)).to(result_dtype);
}

at::Tensor LoraAdapter::forward_swiglu(const Linear& base, const at::Tensor& gate, const at::Tensor& up,
                                      bool training) const {
  if (!kernels.fused_elementwise || !uses_half_precision_path(gate, training) || !fused_swiglu_supported(gate, up)) {
    return {};
  }
  return half_precision_lora_swiglu_linear(gate, up, base, *this);
}

void LoraAdapter::refresh_derived_tensors(at::ScalarType dtype) const {
  if (cache_operands && kernels.half_precision_lora && is_half_precision(dtype)) {
    finetune::half_precision_operands(*this, dtype);
  }
}

std::vector<std::pair<std::string, at::Tensor>> LoraAdapter::named_parameters() const {
  return {{"lora_A.weight", lora_A}, {"lora_B.weight", lora_B}};
}

at::Tensor LoraAdapter::merged_weight(const Linear& base) const {
  // PEFT's merge adds the fp32 delta into the weight in place (W.data += delta): the sum is taken
  // in fp32 and rounded once to W's dtype. Rounding the delta to bf16 first would round twice and
  // differ from PEFT by one unit in the last place in about a quarter of the elements.
  const auto weight = base.dense_weight();
  const auto delta = at::matmul(lora_B, lora_A) * scaling;  // (out, in) fp32
  return (weight.to(at::kFloat) + delta).to(weight.scalar_type());
}

}  // namespace finetune
