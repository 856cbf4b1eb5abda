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

void AdamW::load_state(const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq,
                       int64_t steps) {
  if (exp_avg.size() != parameters_.size() || exp_avg_sq.size() != parameters_.size()) {
    throw Error("AdamW state: " + std::to_string(exp_avg.size()) + " moments for " + std::to_string(parameters_.size()) +
                " parameters");
  }
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!exp_avg[i].sizes().equals(exp_avg_[i].sizes()) || !exp_avg_sq[i].sizes().equals(exp_avg_sq_[i].sizes())) {
      throw Error("AdamW state: the moments of parameter " + std::to_string(i) + " have another shape");
    }
    exp_avg_[i].copy_(exp_avg[i]);
    exp_avg_sq_[i].copy_(exp_avg_sq[i]);
    state_steps_[i].fill_(static_cast<double>(steps));
  }
  step_count_ = steps;
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  if (fused_) {
    std::vector<at::Tensor> grads;
    for (const auto& p : parameters_) grads.push_back(p.grad());
    for (auto& s : state_steps_) s.add_(1);
    at::_fused_adamw_(parameters_, grads, exp_avg_, exp_avg_sq_, {}, state_steps_, lr, options_.beta1,
                      options_.beta2, options_.weight_decay, options_.eps, /*amsgrad=*/false,
                      /*maximize=*/false, std::nullopt, std::nullopt);
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
