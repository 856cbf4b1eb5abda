// Adafactor as HF's Trainer builds it for --optim adafactor: transformers.optimization.Adafactor
// with lr = the scheduled learning rate, scale_parameter=False, relative_step=False,
// warmup_init=False and its defaults eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8,
// beta1=None (no first moment), weight_decay = --weight_decay; its step op for op.
// State per parameter (fp32, transformers' names): a matrix keeps "exp_avg_sq_row" (its shape
// without the last dimension) and "exp_avg_sq_col" (without the second to last); a vector
// "exp_avg_sq" (its shape).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/train/optimizer.h"

namespace finetune {

// Its state layout (Note [Optimizer state layout]).
std::vector<StateTensorSpec> adafactor_state_layout(const at::Tensor& parameter);

class Adafactor final : public Optimizer {
 public:
  Adafactor(std::vector<at::Tensor> parameters, double weight_decay);

  void step(double lr) override;
  int64_t steps_taken() const override { return step_count_; }
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;

 private:
  void step_parameter(at::Tensor& param, ParameterState& moments, double lr, double beta2t);

  std::vector<at::Tensor> parameters_;
  std::vector<ParameterState> moments_;  // the layout's fields, in its order
  double weight_decay_;
  int64_t step_count_ = 0;
};

}  // namespace finetune
