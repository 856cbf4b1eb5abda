// SGD as HF's Trainer builds it for --optim sgd: torch.optim.SGD(lr, weight_decay) without
// momentum (HF passes momentum only through optim_args, which finetune does not take), the
// single-tensor path op for op: grad + weight_decay * param, then param -= lr * that.
// State per parameter: none.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/train/optimizer.h"

namespace finetune {

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<at::Tensor> parameters, double weight_decay);

  void step(double lr) override;
  int64_t steps_taken() const override { return step_count_; }
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;

 private:
  std::vector<at::Tensor> parameters_;
  double weight_decay_;
  int64_t step_count_ = 0;
};

}  // namespace finetune
