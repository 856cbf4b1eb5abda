#include "finetune/train/loss_scaler.h"

#include <cmath>
#include <map>
#include <string>

#include "finetune/util/errors.h"

namespace finetune {

LossScaler::LossScaler(const LossScalerConfig& config, const at::Device& device) : config_(config) {
  if (!(config.growth_factor > 1.0)) throw Error("loss scaler: the growth factor must be > 1.0");
  if (!(config.backoff_factor < 1.0)) throw Error("loss scaler: the backoff factor must be < 1.0");
  if (!std::isfinite(config.init_scale) || !(config.init_scale > 0)) {
    throw Error("loss scaler: the initial scale must be finite and positive, got " + std::to_string(config.init_scale));
  }
  if (config.growth_interval < 1) throw Error("loss scaler: the growth interval must be >= 1");
  const auto options = at::TensorOptions().device(device);
  scale_ = at::full({}, config.init_scale, options.dtype(at::kFloat));
  growth_tracker_ = at::zeros({}, options.dtype(at::kInt));
  found_inf_ = at::zeros({}, options.dtype(at::kFloat));
}

void LossScaler::unscale(const std::vector<at::Tensor>& grads) {
  if (unscaled_) throw Error("loss scaler: unscale() ran twice in one optimizer step (update() goes between)");
  at::NoGradGuard no_grad;
  // The kernel takes one dtype per call; GradScaler groups by device and dtype the same way.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& grad : grads) {
    if (!grad.defined()) continue;
    if (grad.scalar_type() == at::kHalf) {
      throw Error("loss scaler: fp16 gradients cannot be unscaled (trainable tensors must be fp32, as PEFT keeps them)");
    }
    if (grad.device() != scale_.device()) {
      throw Error("loss scaler: a gradient is on " + grad.device().str() + ", the scale on " + scale_.device().str());
    }
    by_dtype[grad.scalar_type()].push_back(grad);
  }
  // GradScaler: "FP32 division can be imprecise for certain compile options, so we carry out the
  // reciprocal in FP64."
  const auto inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  found_inf_.zero_();
  for (const auto& [dtype, group] : by_dtype) {
    at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf_, inv_scale);
  }
  unscaled_ = true;
  skipped_.reset();
}

bool LossScaler::step_was_skipped() {
  if (!unscaled_) throw Error("loss scaler: step_was_skipped() before unscale() in this optimizer step");
  if (!skipped_) skipped_ = found_inf_.item<float>() != 0.0f;
  return *skipped_;
}

void LossScaler::update() {
  if (!unscaled_) throw Error("loss scaler: update() before unscale() in this optimizer step");
  at::NoGradGuard no_grad;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, config_.growth_factor, config_.backoff_factor,
                         config_.growth_interval);
  unscaled_ = false;
  skipped_.reset();
}

LossScalerState LossScaler::state() const {
  return {scale_.item<double>(), static_cast<int64_t>(growth_tracker_.item<int32_t>())};
}

void LossScaler::load_state(const LossScalerState& state) {
  if (!std::isfinite(state.scale) || !(state.scale > 0) || state.growth_tracker < 0) {
    throw Error("loss scaler: a saved state needs a finite positive scale and a growth tracker >= 0, got scale " +
                std::to_string(state.scale) + ", tracker " + std::to_string(state.growth_tracker));
  }
  scale_.fill_(state.scale);
  growth_tracker_.fill_(state.growth_tracker);
}

}  // namespace finetune
