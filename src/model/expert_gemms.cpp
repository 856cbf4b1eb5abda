#include "finetune/model/expert_gemms.h"

#include <torch/csrc/autograd/custom_function.h>

#include "finetune/model/moe_block.h"

namespace finetune {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// For each expert with rows: product(rows of that expert, e) -> (n, width); concatenated (M, width).
template <typename Product>
at::Tensor per_expert(const at::Tensor& rows, const std::vector<int64_t>& counts, int64_t width,
                      const Product& product) {
  std::vector<at::Tensor> outputs;
  int64_t begin = 0;
  for (int64_t e = 0; e < static_cast<int64_t>(counts.size()); ++e) {
    if (counts[e] == 0) continue;
    outputs.push_back(product(rows.narrow(0, begin, counts[e]), e));
    begin += counts[e];
  }
  if (outputs.empty()) return at::zeros({0, width}, rows.options());
  return at::cat(outputs, 0);
}

struct ExpertGemm4bit : public torch::autograd::Function<ExpertGemm4bit> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, const ExpertStack* stack,
                            const ExpertGemmPlan& plan) {
    ctx->saved_data["stack"] = reinterpret_cast<int64_t>(stack);
    ctx->saved_data["grouped"] = plan.grouped;
    if (plan.grouped) ctx->saved_data["offsets"] = plan.offsets;
    ctx->saved_data["counts"] = plan.counts;
    // bitsandbytes: linear(x, dequantize_4bit(W).to(x.dtype)), here for every expert at once.
    return experts_gemm(stack->dense_weight().to(rows.scalar_type()), rows, plan);  // (M, out)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto* stack = reinterpret_cast<const ExpertStack*>(ctx->saved_data["stack"].toInt());
    ExpertGemmPlan plan;
    plan.grouped = ctx->saved_data["grouped"].toBool();
    if (plan.grouped) plan.offsets = ctx->saved_data["offsets"].toTensor();
    plan.counts = ctx->saved_data["counts"].toIntVector();
    const auto& dy = grad_outputs[0];  // (M, out)
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) dx = experts_gemm_input_grad(stack->dense_weight().to(dy.scalar_type()), dy, plan);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

#ifndef FINETUNE_WITH_CUDA  // CUDA builds: cuda/grouped_gemm_support.cpp
bool grouped_gemms_sync_free(const at::Device&) { return false; }
#endif

at::Tensor experts_gemm(const at::Tensor& weight, const at::Tensor& rows, const ExpertGemmPlan& plan) {
  if (plan.grouped) return at::_grouped_mm(rows, weight.transpose(1, 2), plan.offsets);  // (M, out)
  return per_expert(rows, plan.counts, weight.size(1),
                    [&](const at::Tensor& expert_rows, int64_t e) { return at::linear(expert_rows, weight[e]); });
}

at::Tensor experts_gemm_input_grad(const at::Tensor& weight, const at::Tensor& dy, const ExpertGemmPlan& plan) {
  if (plan.grouped) return at::_grouped_mm(dy, weight, plan.offsets);  // (M, in)
  return per_expert(dy, plan.counts, weight.size(2),
                    [&](const at::Tensor& expert_dy, int64_t e) { return at::matmul(expert_dy, weight[e]); });
}

at::Tensor experts_gemm_4bit(const ExpertStack& stack, const at::Tensor& rows, const ExpertGemmPlan& plan) {
  return ExpertGemm4bit::apply(rows, &stack, plan);
}

}  // namespace finetune
