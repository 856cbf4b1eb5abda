#include "finetune/train/sgd.h"

namespace finetune {

Sgd::Sgd(std::vector<at::Tensor> parameters, double weight_decay)
    : parameters_(std::move(parameters)), weight_decay_(weight_decay) {}

OptimizerState Sgd::state() const {
  OptimizerState state;
  state.optimizer = kSgdName;
  state.steps = step_count_;
  state.parameters.resize(parameters_.size());  // no tensors: plain SGD keeps no state
  return state;
}

void Sgd::load_state(const OptimizerState& state) {
  check_optimizer_state(state, kSgdName, parameters_);
  step_count_ = state.steps;
}

// torch.optim.sgd._single_tensor_sgd with momentum 0, dampening 0, nesterov and maximize off.
void Sgd::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  for (auto& param : parameters_) {
    auto grad = param.grad();
    if (weight_decay_ != 0) grad = grad.add(param, weight_decay_);
    param.add_(grad, -lr);
  }
}

}  // namespace finetune
