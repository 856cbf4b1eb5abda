#include "finetune/model/quantized_linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include "finetune/model/linear.h"

namespace finetune {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Linear4bit : public torch::autograd::Function<Linear4bit> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Linear* base) {
    ctx->saved_data["base"] = reinterpret_cast<int64_t>(base);
    // bitsandbytes: linear(x, dequantize_4bit(W).to(x.dtype), bias).
    return at::linear(x, base->dense_weight().to(x.scalar_type()), base->bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto* base = reinterpret_cast<const Linear*>(ctx->saved_data["base"].toInt());
    const auto& dy = grad_outputs[0];                                      // (..., out)
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) dx = at::matmul(dy, base->dense_weight().to(dy.scalar_type()));  // (..., in)
    return {dx, at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_4bit(const at::Tensor& x, const Linear& base) { return Linear4bit::apply(x, &base); }

}  // namespace finetune
