// fp16 dynamic loss scaling: torch.amp.GradScaler as HF Trainer with fp16=True runs it (through
// accelerate). Only fp16 training has one: the trainer holds std::optional<LossScaler>, empty for
// bf16 and fp32, whose gradients do not underflow.
//
// Note [fp16 loss scaling]
// fp16 keeps 5 exponent bits: activation gradients below 2^-24 flush to zero. So the objective is
// multiplied by a large scale before backward, the fp32 adapter gradients are divided by it
// afterwards, and a step whose scaled gradients overflowed (inf / NaN anywhere) is skipped while
// the scale backs off. Per optimizer step, as transformers 5.17 / accelerate 1.15 / torch 2.11 do:
//   1. every micro-batch: backward((loss_sum / global_tokens) * scale())
//      (accelerator.backward: scaler.scale(loss).backward()); the logged loss stays unscaled.
//   2. the DDP all-reduce sums the scaled gradients, so every rank unscales the same values and
//      finds the same overflow: no extra communication (HF DDP likewise).
//   3. unscale(grads) BEFORE clipping: HF's accelerator.clip_grad_norm_ unscales first, and with
//      max_grad_norm <= 0 HF still calls it (with inf) to measure the norm, so unscaling always
//      happens here. The multiply uses scale.double().reciprocal().float(), as GradScaler.unscale_.
//   4. clip_grad_norm on the unscaled gradients; grad_norm is what HF logs. On an overflowed step
//      it is inf or NaN (and clipping turns the gradients to NaN): expected, not divergence, since
//      the step is then skipped and the gradients zeroed.
//   5. step_was_skipped(): one host read of the flag. When true, no optimizer step (parameters,
//      moments and the optimizer's step count unchanged: GradScaler._maybe_opt_step), and the
//      learning-rate schedule does not advance (Trainer: `if not optimizer_step_was_skipped:
//      lr_scheduler.step()`), so the schedule's step is Optimizer::steps_taken(), not global_step.
//      The logged lr is the one the step would have used (HF reads it before scheduler.step).
//      Quirk not followed: with optim=adamw_torch_fused (HF's default on torch >= 2.8) GradScaler
//      gives found_inf to the fused kernel (which skips the update and the step count itself) and
//      still calls optimizer.step(), so accelerate sees a step and its scheduler DOES advance on
//      overflowed steps. --optim adamw_torch (which also stands for adamw_torch_fused) follows HF's
//      adamw_torch and adamw_8bit, whose schedule stands still (checked on accelerate 1.15's
//      AcceleratedOptimizer; the two differ only under warmup/decay schedules, on skipped steps).
//   6. update() (accelerate: scaler.step(optimizer) then scaler.update()): on overflow
//      scale *= backoff_factor and the growth tracker resets; otherwise the tracker counts up and
//      at growth_interval the scale grows by growth_factor (kept if that would be infinite) and
//      the tracker resets (at::_amp_update_scale_).
//   7. everything else goes on as for any step: global_step, epoch and the data advance, the
//      step's (finite) loss is logged and averaged, checkpoints and evaluation happen on schedule.
// A checkpoint keeps the scale and the growth tracker (HF's scaler.pt also holds the factors and
// the interval, fixed here); one without them (a bf16 run's, an older one) resumes at init_scale,
// as HF does without scaler.pt.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

// GradScaler's defaults, which HF Trainer uses unchanged (TrainingArguments has no field for them;
// only accelerate's GradScalerKwargs would change them).
struct LossScalerConfig {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// What a checkpoint keeps (GradScaler.state_dict's "scale" and "_growth_tracker").
struct LossScalerState {
  double scale = 0;
  int64_t growth_tracker = 0;
};

class LossScaler {
 public:
  // Error unless growth_factor > 1 and backoff_factor < 1 (GradScaler's checks), init_scale is
  // finite and positive and growth_interval >= 1.
  LossScaler(const LossScalerConfig& config, const at::Device& device);

  // fp32 scalar on the device the backward objective is multiplied by. Always the same tensor,
  // changed in place by update() and load_state(), so a captured CUDA graph reads the current value.
  const at::Tensor& scale() const { return scale_; }

  // Divides the gradients (the device's, in place) by the scale and records whether any is inf or
  // NaN (at::_amp_foreach_non_finite_check_and_unscale_ per dtype, as GradScaler.unscale_).
  // Undefined tensors are left out (GradScaler skips parameters without .grad). Error for fp16
  // gradients (GradScaler refuses them too), another device, or a second call before update().
  void unscale(const std::vector<at::Tensor>& grads);

  // Whether the gradients unscale() saw overflowed, so the optimizer step must be skipped. Reads
  // the device flag to the host once per step (GradScaler.step syncs the same way).
  bool step_was_skipped();

  // Backs off or grows the scale from the flag unscale() set (at::_amp_update_scale_); no host sync.
  void update();

  LossScalerState state() const;                 // reads the device scalars
  void load_state(const LossScalerState& state);  // in place, as GradScaler.load_state_dict

  const LossScalerConfig& config() const { return config_; }

 private:
  LossScalerConfig config_;
  at::Tensor scale_;           // fp32 0-dim, GradScaler._scale
  at::Tensor growth_tracker_;  // int32 0-dim, GradScaler._growth_tracker
  at::Tensor found_inf_;       // fp32 0-dim, 1.0 when the last unscale() saw inf / NaN
  bool unscaled_ = false;      // unscale() ran since the last update()
  std::optional<bool> skipped_;  // found_inf_ read to the host this step
};

}  // namespace finetune
