#include "finetune/train/micro_step.h"

#include "finetune/train/loss.h"

namespace finetune {

at::Tensor forward_backward(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward,
                            const Objective& objective, const at::Tensor& normaliser, const at::Tensor& loss_scale) {
  const auto loss_sum = objective.loss_sum(model, batch, forward);
  backward_normalised_loss(loss_sum, normaliser, loss_scale);
  return loss_sum.detach();
}

LossAndMetrics forward_backward_with_metrics(const CausalLM& model, const MicroBatchInputs& batch,
                                             const ForwardOptions& forward, const Objective& objective,
                                             const at::Tensor& normaliser, const at::Tensor& loss_scale) {
  LossAndMetrics out = objective.loss_and_metric_sums(model, batch, forward);
  backward_normalised_loss(out.loss_sum, normaliser, loss_scale);
  out.loss_sum = out.loss_sum.detach();
  return out;
}

}  // namespace finetune
