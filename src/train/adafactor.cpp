#include "finetune/train/adafactor.h"

#include <cmath>

namespace finetune {
namespace {

constexpr double kEps1 = 1e-30;         // eps[0]: added to grad**2
constexpr double kClipThreshold = 1.0;  // clip_threshold
constexpr double kDecayRate = -0.8;     // decay_rate

// Adafactor._rms: tensor.norm(2) / (tensor.numel() ** 0.5).
at::Tensor rms(const at::Tensor& tensor) {
  return tensor.norm(2) / std::pow(static_cast<double>(tensor.numel()), 0.5);
}

// Adafactor._approx_sq_grad.
at::Tensor approx_sq_grad(const at::Tensor& exp_avg_sq_row, const at::Tensor& exp_avg_sq_col) {
  const auto r_factor = (exp_avg_sq_row / exp_avg_sq_row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);
  const auto c_factor = exp_avg_sq_col.unsqueeze(-2).rsqrt();
  return at::mul(r_factor, c_factor);
}

bool factored(const at::Tensor& parameter) { return parameter.dim() >= 2; }

}  // namespace

std::vector<StateTensorSpec> adafactor_state_layout(const at::Tensor& parameter) {
  const auto shape = parameter.sizes().vec();
  if (!factored(parameter)) return {{"exp_avg_sq", shape, at::kFloat}};
  std::vector<int64_t> row(shape.begin(), shape.end() - 1);       // grad_shape[:-1]
  std::vector<int64_t> col(shape.begin(), shape.end() - 2);       // grad_shape[:-2] + grad_shape[-1:]
  col.push_back(shape.back());
  return {{"exp_avg_sq_row", row, at::kFloat}, {"exp_avg_sq_col", col, at::kFloat}};
}

Adafactor::Adafactor(std::vector<at::Tensor> parameters, double weight_decay)
    : parameters_(std::move(parameters)), weight_decay_(weight_decay) {
  for (const auto& p : parameters_) {
    ParameterState moments;
    for (const auto& spec : adafactor_state_layout(p)) {
      moments.emplace_back(spec.field, at::zeros(spec.shape, p.options().dtype(spec.dtype).requires_grad(false)));
    }
    moments_.push_back(std::move(moments));
  }
}

OptimizerState Adafactor::state() const {
  OptimizerState state;
  state.optimizer = kAdafactorName;
  state.steps = step_count_;
  state.parameters = moments_;  // views of the optimizer's own tensors
  return state;
}

void Adafactor::load_state(const OptimizerState& state) {
  check_optimizer_state(state, kAdafactorName, parameters_);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < moments_.size(); ++i) {
    for (size_t k = 0; k < moments_[i].size(); ++k) moments_[i][k].second.copy_(state.parameters[i][k].second);
  }
  step_count_ = state.steps;
}

void Adafactor::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  // beta2t = 1.0 - math.pow(state["step"], decay_rate): every parameter steps together here.
  const double beta2t = 1.0 - std::pow(static_cast<double>(step_count_), kDecayRate);
  for (size_t i = 0; i < parameters_.size(); ++i) step_parameter(parameters_[i], moments_[i], lr, beta2t);
}

// Adafactor.step for one parameter, with relative_step and scale_parameter off (lr is the
// group's) and beta1 None.
void Adafactor::step_parameter(at::Tensor& param, ParameterState& moments, double lr, double beta2t) {
  auto grad = param.grad();
  if (grad.scalar_type() == at::kHalf || grad.scalar_type() == at::kBFloat16) grad = grad.to(at::kFloat);
  const bool half = param.scalar_type() == at::kHalf || param.scalar_type() == at::kBFloat16;
  at::Tensor p = half ? param.to(at::kFloat) : param;
  at::Tensor update = grad.pow(2).add_(kEps1);  // (grad**2) + eps[0]
  if (factored(param)) {
    auto& row = moments[0].second;
    auto& col = moments[1].second;
    row.mul_(beta2t).add_(update.mean(-1), 1.0 - beta2t);
    col.mul_(beta2t).add_(update.mean(-2), 1.0 - beta2t);
    update = approx_sq_grad(row, col);
    update.mul_(grad);
  } else {
    auto& exp_avg_sq = moments[0].second;
    exp_avg_sq.mul_(beta2t).add_(update, 1.0 - beta2t);
    update = exp_avg_sq.rsqrt().mul_(grad);
  }
  update.div_((rms(update) / kClipThreshold).clamp_(1.0));
  update.mul_(lr);
  if (weight_decay_ != 0) p.add_(p, -weight_decay_ * lr);
  p.add_(-update);
  if (half) param.copy_(p);
}

}  // namespace finetune
