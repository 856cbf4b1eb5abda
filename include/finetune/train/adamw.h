// AdamW with torch.optim.AdamW's arithmetic (decoupled weight decay, bias correction in double
// precision on the host). Without `fused` it runs the single-tensor formula step by step, which is
// what the reference loop runs on the CPU; with `fused` (KernelPolicy::fused_adamw, CUDA) ATen's
// multi-tensor fused kernel (_fused_adamw_), one launch for all parameters.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  AdamW(std::vector<at::Tensor> parameters, AdamWOptions options, bool fused);

  // One update with learning rate `lr` from the parameters' current .grad.
  void step(double lr);
  int64_t steps_taken() const { return step_count_; }

  // The moments (views of the optimizer's own tensors, parameter order) for checkpoints.
  const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  // Continues from saved moments and step count (copied in; shapes must match the parameters).
  void load_state(const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq, int64_t steps);

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
