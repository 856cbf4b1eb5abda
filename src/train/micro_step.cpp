#include "finetune/train/micro_step.h"

#include "finetune/train/loss.h"

namespace finetune {

at::Tensor forward_backward(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward,
                            const Objective& objective, const at::Tensor& normaliser, const at::Tensor& loss_scale) {
  const auto loss_sum = objective.loss_sum(model, batch, forward);
  backward_normalised_loss(loss_sum, normaliser, loss_scale);
  return loss_sum.detach();
}

}  // namespace finetune
