#include "finetune/model/expert_dispatch.h"

#include <torch/csrc/autograd/custom_function.h>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The type the k-term (and C-term) sums accumulate in: fp32 for half types, else the widest input.
at::ScalarType accumulate_type(const at::Tensor& rows, const at::Tensor& weights) {
  auto type = at::promote_types(rows.scalar_type(), at::kFloat);
  return weights.defined() ? at::promote_types(type, weights.scalar_type()) : type;
}

// src (R, C) gathered by inverse into (N, k, C), optionally weighted by weights (N, k), summed over
// k in the accumulate type and rounded once to src's dtype -> (N, C).
at::Tensor aten_gathered_row_sum(const at::Tensor& src, const at::Tensor& weights, const ExpertDispatch& dispatch) {
  const auto accumulate = accumulate_type(src, weights);
  const auto gathered = src.index_select(0, dispatch.inverse).view({dispatch.num_tokens(), dispatch.top_k, src.size(1)});
  if (!weights.defined()) return at::sum(gathered, {1}, /*keepdim=*/false, accumulate).to(src.scalar_type());
  const auto weighted = gathered.to(accumulate) * weights.to(accumulate).unsqueeze(-1);  // (N, k, C)
  return weighted.sum(1).to(src.scalar_type());
}

// Note [Gathered expert dispatch]: the combine's backward as ATen gathers, (doutputs, dweights).
std::pair<at::Tensor, at::Tensor> aten_combine_backward(const at::Tensor& grad, const at::Tensor& outputs,
                                                        const at::Tensor& weights, const ExpertDispatch& dispatch,
                                                        bool outputs_grad, bool weights_grad) {
  const auto accumulate = accumulate_type(outputs, weights);
  at::Tensor d_outputs, d_weights;
  if (outputs_grad) {
    const auto sorted_weights = weights.reshape({-1}).index_select(0, dispatch.order).to(accumulate);  // (N*k)
    d_outputs = (grad.index_select(0, dispatch.tokens).to(accumulate) * sorted_weights.unsqueeze(1))
                    .to(outputs.scalar_type());  // (N*k, C)
  }
  if (weights_grad) {
    const auto gathered = outputs.index_select(0, dispatch.inverse).view({dispatch.num_tokens(), dispatch.top_k, -1});
    d_weights = (gathered.to(accumulate) * grad.to(accumulate).unsqueeze(1)).sum(-1).to(weights.scalar_type());  // (N, k)
  }
  return {d_outputs, d_weights};
}

// The index tensors travel as non-differentiable inputs, saved for backward.
void save_dispatch(AutogradContext* ctx, const ExpertDispatch& dispatch, bool fused) {
  ctx->saved_data["top_k"] = dispatch.top_k;
  ctx->saved_data["order"] = dispatch.order;
  ctx->saved_data["tokens"] = dispatch.tokens;
  ctx->saved_data["inverse"] = dispatch.inverse;
  ctx->saved_data["fused"] = fused;
}

ExpertDispatch saved_dispatch(AutogradContext* ctx) {
  ExpertDispatch dispatch;
  dispatch.top_k = ctx->saved_data["top_k"].toInt();
  dispatch.order = ctx->saved_data["order"].toTensor();
  dispatch.tokens = ctx->saved_data["tokens"].toTensor();
  dispatch.inverse = ctx->saved_data["inverse"].toTensor();
  return dispatch;
}

struct DispatchRows : public torch::autograd::Function<DispatchRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const ExpertDispatch& dispatch, bool fused) {
    save_dispatch(ctx, dispatch, fused);
    return x.index_select(0, dispatch.tokens);  // (N*k, C)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto dispatch = saved_dispatch(ctx);
    const auto d_rows = grad_outputs[0].contiguous();  // (N*k, C)
    const auto d_x = ctx->saved_data["fused"].toBool()
                         ? fused_gathered_row_sum(d_rows, dispatch.inverse, at::Tensor(), dispatch.num_tokens(),
                                                  dispatch.top_k)
                         : aten_gathered_row_sum(d_rows, at::Tensor(), dispatch);
    return {d_x, at::Tensor(), at::Tensor()};
  }
};

struct CombineRows : public torch::autograd::Function<CombineRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& outputs, const at::Tensor& weights,
                            const ExpertDispatch& dispatch, bool fused) {
    save_dispatch(ctx, dispatch, fused);
    ctx->save_for_backward({outputs, weights});
    if (!fused) return aten_gathered_row_sum(outputs, weights, dispatch);
    return fused_gathered_row_sum(outputs, dispatch.inverse, weights.reshape({-1}), dispatch.num_tokens(),
                                  dispatch.top_k);  // (N, C)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto dispatch = saved_dispatch(ctx);
    const auto saved = ctx->get_saved_variables();
    const auto grad = grad_outputs[0].contiguous();  // (N, C)
    const bool outputs_grad = ctx->needs_input_grad(0), weights_grad = ctx->needs_input_grad(1);
    auto [d_outputs, d_weights] =
        ctx->saved_data["fused"].toBool()
            ? fused_combine_backward(grad, saved[0], saved[1], dispatch, outputs_grad, weights_grad)
            : aten_combine_backward(grad, saved[0], saved[1], dispatch, outputs_grad, weights_grad);
    return {d_outputs, d_weights, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

ExpertDispatch plan_expert_dispatch(const at::Tensor& experts) {
  if (experts.dim() != 2) throw Error("plan_expert_dispatch: expected experts (N, k)");
  ExpertDispatch dispatch;
  dispatch.top_k = experts.size(1);
  const auto flat = experts.reshape({-1});                                  // (N*k)
  dispatch.order = at::argsort(flat, /*stable=*/true);                      // (N*k)
  dispatch.tokens = at::div(dispatch.order, dispatch.top_k, "floor");       // (N*k)
  // A permutation's inverse: every slot written exactly once, so no atomics and no ordering.
  dispatch.inverse = at::empty_like(dispatch.order)
                         .scatter_(0, dispatch.order, at::arange(flat.numel(), dispatch.order.options()));
  return dispatch;
}

at::Tensor dispatch_rows(const at::Tensor& x, const ExpertDispatch& dispatch, bool fused) {
  if (x.dim() != 2 || x.size(0) != dispatch.num_tokens()) {
    throw Error("dispatch_rows: expected x (N, C) with N = " + std::to_string(dispatch.num_tokens()) + " tokens");
  }
  return DispatchRows::apply(x, dispatch, fused);
}

at::Tensor combine_rows(const at::Tensor& outputs, const at::Tensor& weights, const ExpertDispatch& dispatch,
                        bool fused) {
  if (outputs.dim() != 2 || outputs.size(0) != dispatch.inverse.numel() ||
      weights.sizes() != at::IntArrayRef{dispatch.num_tokens(), dispatch.top_k}) {
    throw Error("combine_rows: expected outputs (N*k, C) and weights (N, k) for N = " +
                std::to_string(dispatch.num_tokens()) + ", k = " + std::to_string(dispatch.top_k));
  }
  return CombineRows::apply(outputs, weights, dispatch, fused);
}

#ifndef FINETUNE_WITH_CUDA  // CUDA builds: cuda/expert_dispatch_fused.cpp
at::Tensor fused_gathered_row_sum(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t) {
  throw Error("fused_gathered_row_sum: this build has no CUDA kernels");
}

std::pair<at::Tensor, at::Tensor> fused_combine_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                         const ExpertDispatch&, bool, bool) {
  throw Error("fused_combine_backward: this build has no CUDA kernels");
}
#endif

}  // namespace finetune
