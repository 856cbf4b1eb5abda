#include "finetune/lora/dora_adapter.h"

#include <optional>
#include <utility>

namespace finetune {
namespace {

// PEFT's DoraLinearLayer.get_weight_norm: ||weight + scaling * lora_weight|| per output row (over
// in_features), in the dtype of the sum. (out, in), (out, in) -> (out)
at::Tensor row_norm(const at::Tensor& weight, const at::Tensor& lora_weight, double scaling) {
  const auto sum = weight + lora_weight * scaling;
  return at::linalg_norm(sum, std::optional<at::Scalar>(), at::IntArrayRef{1}).to(sum.scalar_type());
}

// PEFT's DoraLinearLayer.get_lora_weight, lora_B(lora_A(I)).T: the update B A (out, in) as the
// GEMM (in, r) @ (r, out) that PEFT runs. lora_A(I) is A^T exactly, so it is taken as A^T
// without forming the (in, in) identity.
at::Tensor lora_weight(const LoraAdapter& low_rank) {
  return at::linear(low_rank.lora_A.t().contiguous(), low_rank.lora_B).t();
}

}  // namespace

DoraAdapter::DoraAdapter(LoraAdapter low_rank_pair, const Linear& base) : low_rank(std::move(low_rank_pair)) {
  at::NoGradGuard no_grad;
  const at::Tensor weight = base.dense_weight();  // (out, in), compute dtype
  const auto dtype = weight.scalar_type();
  // PEFT has cast lora_A/lora_B to the base dtype by then; fp16 ones it multiplies in fp32 and rounds.
  const auto& A = low_rank.lora_A;
  const auto& B = low_rank.lora_B;
  const auto update = dtype == at::kHalf ? at::matmul(B, A).to(dtype) : at::matmul(B.to(dtype), A.to(dtype));
  lora_magnitude_vector = row_norm(weight, update, low_rank.scaling).to(at::kFloat).requires_grad_(true);  // (out)
}

at::Tensor DoraAdapter::forward(const Linear& base, const at::Tensor& x, bool training) const {
  // The order of the operations is PEFT's (lora.Linear.forward, DoraLinearVariant.forward,
  // DoraLinearLayer.forward), so that their values and the backward's accumulations agree.
  const auto result = base.base_forward(x);  // (..., out) in x's dtype, bias included
  const auto result_dtype = result.scalar_type();
  auto input = x.to(low_rank.lora_A.scalar_type());  // (..., in) fp32
  const bool dropped = training && low_rank.dropout > 0;
  if (dropped) input = at::dropout(input, low_rank.dropout, /*train=*/true);
  const at::Tensor weight = base.dense_weight().to(input.scalar_type());  // (out, in) fp32
  at::Tensor weight_norm;                                                 // (out), a constant
  {
    at::NoGradGuard no_grad;
    weight_norm = row_norm(weight, lora_weight(low_rank), low_rank.scaling);
  }
  const auto mag_norm_scale = (lora_magnitude_vector / weight_norm).view({1, -1});           // (1, out)
  const auto lora_result = at::linear(at::linear(input, low_rank.lora_A), low_rank.lora_B);  // (..., out)
  at::Tensor base_result = result;                                                            // x W^T
  if (dropped) {
    base_result = at::linear(input, weight);
  } else if (base.bias.defined()) {
    base_result = result - base.bias;
  }
  const auto result_dora = (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * low_rank.scaling;
  return (result + result_dora).to(result_dtype);
}

std::vector<std::pair<std::string, at::Tensor>> DoraAdapter::named_parameters() const {
  auto named = low_rank.named_parameters();
  named.emplace_back("lora_magnitude_vector", lora_magnitude_vector);
  return named;
}

at::Tensor DoraAdapter::merged_weight(const Linear& base) const {
  at::NoGradGuard no_grad;
  const at::Tensor weight = base.dense_weight();                                     // (out, in)
  const auto delta = at::matmul(low_rank.lora_B, low_rank.lora_A) * low_rank.scaling;  // (out, in) fp32
  // PEFT's merge takes the norm with the scaling already in the delta (scaling 1).
  const auto weight_norm = row_norm(weight, delta, 1.0);                               // (out) fp32
  const auto dora_factor = (lora_magnitude_vector / weight_norm).view({-1, 1});        // (out, 1)
  return (dora_factor * (weight + delta)).to(weight.scalar_type());
}

}  // namespace finetune
