#include "finetune/lora/half_precision_lora_linear.h"

#include <torch/csrc/autograd/custom_function.h>

namespace finetune {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// a (m, k) @ b (k, n) of half-precision operands with an fp32 result: the GEMM's fp32
// accumulator is returned unrounded. cuBLAS does this in one call; the CPU widens the operands
// (exact) and multiplies in fp32.
at::Tensor matmul_to_float(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_cuda()) return at::mm(a, b, at::kFloat);
  return at::mm(a.to(at::kFloat), b.to(at::kFloat));
}

// Note [Split fp32 operands]
// An fp32 tensor t is t_hi + t_lo with t_hi = half(t), t_lo = half(t - t_hi) up to about 2^-17
// relative. A product with a half-precision operand m then runs as one GEMM over [t_hi, t_lo]
// (twice the rank, still a skinny product bound by reading m) and the two halves of the fp32
// result are summed: the adapter weights, their gradients and the (tokens x r) intermediates keep
// about fp32 accuracy although the GEMM reads half-precision operands.
at::Tensor split_hi_lo(const at::Tensor& t, at::ScalarType dtype, int64_t dim) {
  auto hi = t.to(dtype);
  auto lo = (t - hi.to(at::kFloat)).to(dtype);
  return at::cat({hi, lo}, dim);
}

// u (N, r) @ v (r, M), both fp32, accumulated into the half-precision `out` (N, M) by one GEMM
// of rank 3r: u_hi v_hi + u_lo v_hi + u_hi v_lo (the lo * lo term is below fp32 rounding), so
// `out` receives the fp32 product and is rounded once.
void add_low_rank_product(at::Tensor& out, const at::Tensor& u, const at::Tensor& v) {
  const auto dtype = out.scalar_type();
  auto u_hi = u.to(dtype), u_lo = (u - u_hi.to(at::kFloat)).to(dtype);
  auto v_hi = v.to(dtype), v_lo = (v - v_hi.to(at::kFloat)).to(dtype);
  out.addmm_(at::cat({u_hi, u_lo, u_hi}, 1), at::cat({v_hi, v_hi, v_lo}, 0));
}

// (..., 2r) or (2r, ...) fp32 product of a split operand -> the sum of its two halves.
at::Tensor sum_halves(const at::Tensor& t, int64_t dim) {
  const int64_t r = t.size(dim) / 2;
  return t.narrow(dim, 0, r) + t.narrow(dim, r, r);
}

struct HalfPrecisionLoraLinear : public torch::autograd::Function<HalfPrecisionLoraLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& lora_A,
                            const at::Tensor& lora_B, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, double scaling) {
    const auto dtype = x.scalar_type();
    auto rows = x.reshape({-1, x.size(-1)});                                          // (N, in)
    auto y = bias ? at::addmm(*bias, rows, weight.t()) : at::mm(rows, weight.t());   // (N, out)
    auto split_A = split_hi_lo(lora_A, dtype, 0);                                     // (2r, in)
    auto xa = sum_halves(matmul_to_float(rows, split_A.t()), 1) * scaling;            // (N, r) fp32
    add_low_rank_product(y, xa, lora_B.t());  // y += scaling x A^T B^T: the sum is rounded once
    ctx->save_for_backward({rows, weight, lora_A, lora_B, xa});
    ctx->saved_data["scaling"] = scaling;
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = weight.size(0);
    return y.view(out_sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& rows = saved[0];
    const auto& weight = saved[1];
    const auto& lora_A = saved[2];
    const auto& lora_B = saved[3];
    const auto& xa = saved[4];
    const double scaling = ctx->saved_data["scaling"].toDouble();
    const auto& grad = grad_outputs[0];
    const auto dtype = grad.scalar_type();
    auto dy = grad.reshape({-1, grad.size(-1)});                                          // (N, out)
    // The gradient reaching x A^T: scaling * dy B, fp32.
    auto dxa = sum_halves(matmul_to_float(dy, split_hi_lo(lora_B, dtype, 1)), 1) * scaling;  // (N, r)
    at::Tensor dx, d_lora_A, d_lora_B;
    if (ctx->needs_input_grad(0)) {
      dx = at::mm(dy, weight);                                                              // (N, in)
      add_low_rank_product(dx, dxa, lora_A);
      auto in_sizes = grad.sizes().vec();
      in_sizes.back() = rows.size(1);
      dx = dx.view(in_sizes);
    }
    if (ctx->needs_input_grad(1)) {
      d_lora_A = sum_halves(matmul_to_float(split_hi_lo(dxa, dtype, 1).t(), rows), 0);   // (r, in)
    }
    if (ctx->needs_input_grad(2)) {
      d_lora_B = sum_halves(matmul_to_float(dy.t(), split_hi_lo(xa, dtype, 1)), 1);      // (out, r)
    }
    return {dx, d_lora_A, d_lora_B, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool use_half_precision_lora(const at::Tensor& x, const LoraAdapter& adapter, bool training) {
  const auto dtype = x.scalar_type();
  return (dtype == at::kBFloat16 || dtype == at::kHalf) && !(training && adapter.dropout > 0);
}

at::Tensor half_precision_lora_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                      const LoraAdapter& adapter) {
  // An undefined tensor cannot be a Function input: a missing bias travels as nullopt.
  const auto optional_bias = bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
  return HalfPrecisionLoraLinear::apply(x, adapter.lora_A, adapter.lora_B, weight, optional_bias, adapter.scaling);
}

}  // namespace finetune
