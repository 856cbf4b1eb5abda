// 8-bit AdamW: the state, checkpoints and the reference (bnb CPU) path; the CUDA path's host side
// is adamw_8bit_cuda.cpp.
#include "finetune/train/adamw_8bit.h"

#include <cmath>

#include "finetune/quant/blockwise_8bit.h"
#include "finetune/util/errors.h"

namespace finetune {

std::vector<StateTensorSpec> adamw_8bit_state_layout(const at::Tensor& parameter) {
  const auto shape = parameter.sizes().vec();
  if (parameter.numel() < kAdamW8bitMinSize) return {{"state1", shape, at::kFloat}, {"state2", shape, at::kFloat}};
  const std::vector<int64_t> blocks = {(parameter.numel() + kAdamW8bitBlockSize - 1) / kAdamW8bitBlockSize};
  return {{"state1", shape, at::kByte}, {"absmax1", blocks, at::kFloat},
          {"state2", shape, at::kByte}, {"absmax2", blocks, at::kFloat}};
}

AdamW8bit::AdamW8bit(std::vector<at::Tensor> parameters, AdamWOptions options, bool cuda_kernel)
    : parameters_(std::move(parameters)), options_(options) {
  for (const auto& p : parameters_) {
    Moments moments;
    for (const auto& spec : adamw_8bit_state_layout(p)) {
      auto zeros = at::zeros(spec.shape, p.options().dtype(spec.dtype).requires_grad(false));
      if (spec.field == "state1") moments.state1 = zeros;
      if (spec.field == "absmax1") moments.absmax1 = zeros;
      if (spec.field == "state2") moments.state2 = zeros;
      if (spec.field == "absmax2") moments.absmax2 = zeros;
    }
    moments_.push_back(moments);
  }
  const auto device = parameters_.empty() ? at::Device(at::kCPU) : parameters_.front().device();
  signed_map_ = dynamic_map(/*is_signed=*/true).to(device);
  unsigned_map_ = dynamic_map(/*is_signed=*/false).to(device);
  if (cuda_kernel) start_kernel();
}

OptimizerState AdamW8bit::state() const {
  OptimizerState state;
  state.optimizer = kAdamW8bitName;
  state.steps = step_count_;
  for (const auto& m : moments_) {
    if (m.blockwise()) {
      state.parameters.push_back({{"state1", m.state1}, {"absmax1", m.absmax1}, {"state2", m.state2}, {"absmax2", m.absmax2}});
    } else {
      state.parameters.push_back({{"state1", m.state1}, {"state2", m.state2}});
    }
  }
  return state;
}

void AdamW8bit::load_state(const OptimizerState& state) {
  check_optimizer_state(state, kAdamW8bitName, parameters_);
  at::NoGradGuard no_grad;
  const auto own = this->state();  // the same fields in the same order (the layout's)
  for (size_t i = 0; i < own.parameters.size(); ++i) {
    for (size_t k = 0; k < own.parameters[i].size(); ++k) {
      at::Tensor target = own.parameters[i][k].second;  // shares the optimizer's storage
      target.copy_(state.parameters[i][k].second);
    }
  }
  step_count_ = state.steps;
}

void AdamW8bit::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  if (kernel_) {
    step_kernel(lr);
    mark_parameters_updated(parameters_);  // Note [Parameter versions after a step]
  } else {
    step_reference(lr);
  }
}

// bnb's CPU backend (backends/cpu/ops.py) op for op, with its double scalars: Python's
// `beta ** step` is the C library's pow, as std::pow is. gnorm_scale is 1 (HF clips before the
// step), and `g.float() * 1.0` has g's values, so the multiplication is left out.
void AdamW8bit::step_reference(double lr) {
  const double beta1 = options_.beta1, beta2 = options_.beta2, eps = options_.eps, wd = options_.weight_decay;
  const double step = static_cast<double>(step_count_);
  const double correction1 = 1.0 - std::pow(beta1, step);
  const double correction2 = std::sqrt(1.0 - std::pow(beta2, step));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto& param = parameters_[i];
    auto& m = moments_[i];
    const auto grad = param.grad().to(at::kFloat);
    auto p = param.to(at::kFloat);  // the parameter itself when it is fp32 (bnb: p.data.float())
    if (m.blockwise()) {
      // _optimizer_update_8bit_blockwise_cpu, optimizer "adam"
      auto state1 = dequantize_blockwise(m.state1, m.absmax1, signed_map_, kAdamW8bitBlockSize, at::kFloat);
      auto state2 = dequantize_blockwise(m.state2, m.absmax2, unsigned_map_, kAdamW8bitBlockSize, at::kFloat);
      state1.mul_(beta1).add_(grad, 1.0 - beta1);
      state2.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);
      const auto denom = (state2.sqrt() / correction2).add_(eps);
      if (wd > 0.0) p.mul_(1.0 - lr * wd);
      p.addcdiv_(state1, denom, -lr / correction1);
      if (!p.is_same(param)) param.copy_(p);
      quantize_blockwise_into(state1, signed_map_, kAdamW8bitBlockSize, m.state1, m.absmax1);
      quantize_blockwise_into(state2, unsigned_map_, kAdamW8bitBlockSize, m.state2, m.absmax2);
    } else {
      // _optimizer_update_32bit_cpu, optimizer "adam" (max_unorm 0: update_scale 1)
      m.state1.mul_(beta1).add_(grad, 1.0 - beta1);
      m.state2.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);
      const double step_size = -lr * correction2 / correction1;
      if (wd > 0.0) p.mul_(1.0 - lr * wd);
      const auto update = m.state1 / (m.state2.sqrt() + eps * correction2);
      p.add_(update, step_size);
      if (!p.is_same(param)) param.copy_(p);
    }
  }
}

}  // namespace finetune
