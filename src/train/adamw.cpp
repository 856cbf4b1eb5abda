#include "finetune/train/adamw.h"

#include <cmath>

#include "finetune/util/errors.h"

namespace finetune {

AdamW::AdamW(std::vector<at::Tensor> parameters, AdamWOptions options, bool fused)
    : parameters_(std::move(parameters)), options_(options), fused_(fused) {
  for (const auto& p : parameters_) {
    exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    state_steps_.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
  }
}

std::vector<StateTensorSpec> adamw_state_layout(const at::Tensor& parameter) {
  const auto shape = parameter.sizes().vec();
  return {{"exp_avg", shape, parameter.scalar_type()}, {"exp_avg_sq", shape, parameter.scalar_type()}};
}

OptimizerState AdamW::state() const {
  OptimizerState state;
  state.optimizer = kAdamWTorchName;
  state.steps = step_count_;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    state.parameters.push_back({{"exp_avg", exp_avg_[i]}, {"exp_avg_sq", exp_avg_sq_[i]}});
  }
  return state;
}

void AdamW::load_state(const OptimizerState& state) {
  check_optimizer_state(state, kAdamWTorchName, parameters_);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    exp_avg_[i].copy_(state.parameters[i][0].second);  // the layout's order: exp_avg, exp_avg_sq
    exp_avg_sq_[i].copy_(state.parameters[i][1].second);
    state_steps_[i].fill_(static_cast<double>(state.steps));
  }
  step_count_ = state.steps;
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  if (fused_) {
    std::vector<at::Tensor> grads;
    for (const auto& p : parameters_) grads.push_back(p.grad());
    at::_foreach_add_(state_steps_, 1);  // torch.optim.adamw._fused_adamw's step count, one launch
    at::_fused_adamw_(parameters_, grads, exp_avg_, exp_avg_sq_, {}, state_steps_, lr, options_.beta1,
                      options_.beta2, options_.weight_decay, options_.eps, /*amsgrad=*/false,
                      /*maximize=*/false, std::nullopt, std::nullopt);
    mark_parameters_updated(parameters_);  // Note [Parameter versions after a step]
    return;
  }
  // torch.optim.adamw._single_tensor_adamw (non-capturable, non-amsgrad), op for op.
  const double step = static_cast<double>(step_count_);
  const double bias_correction1 = 1 - std::pow(options_.beta1, step);
  const double bias_correction2 = 1 - std::pow(options_.beta2, step);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto& param = parameters_[i];
    const auto& grad = param.grad();
    param.mul_(1 - lr * options_.weight_decay);
    exp_avg_[i].lerp_(grad, 1 - options_.beta1);
    exp_avg_sq_[i].mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
    auto denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(options_.eps);
    param.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

}  // namespace finetune
