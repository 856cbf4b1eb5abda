// AdamW with torch.optim.AdamW's arithmetic (decoupled weight decay, bias correction in double
// precision on the host). Without `fused` it runs the single-tensor formula step by step, which is
// what the reference loop runs on the CPU; with `fused` (KernelPolicy::fused_adamw, CUDA) ATen's
// multi-tensor fused kernel (_fused_adamw_), one launch for all parameters.
// State per parameter (--optim adamw_torch): "exp_avg", "exp_avg_sq", the parameter's shape and dtype.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/train/optimizer.h"

namespace finetune {

// Its state layout (Note [Optimizer state layout]).
std::vector<StateTensorSpec> adamw_state_layout(const at::Tensor& parameter);

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<at::Tensor> parameters, AdamWOptions options, bool fused);

  void step(double lr) override;
  int64_t steps_taken() const override { return step_count_; }
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;

 private:
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
  std::vector<at::Tensor> state_steps_;  // fp32 scalars on the device (fused kernel's step tensors)
  AdamWOptions options_;
  bool fused_;
  int64_t step_count_ = 0;
};

}  // namespace finetune
