// One training micro-step, the same function for the eager path (train/trainer.h) and inside a
// captured CUDA graph (train/micro_step_graphs.h): the objective's forward and loss sum, then the
// backward of loss_sum / normaliser (times the fp16 loss scale when defined), gradients
// accumulating into the parameters' .grad (and the reducer's buckets).
#pragma once

#include <ATen/ATen.h>

#include "finetune/model/causal_lm.h"
#include "finetune/train/objective.h"

namespace finetune {

// normaliser: the step's global normaliser (fp32 device scalar, Note [Global token
// normalisation]); loss_scale: undefined, or the fp16 scale (train/loss_scaler.h). Returns the
// detached loss sum (fp32 device scalar).
at::Tensor forward_backward(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward,
                            const Objective& objective, const at::Tensor& normaliser, const at::Tensor& loss_scale);

// The same, returning the objective's metric sums too (Objective::loss_and_metric_sums).
LossAndMetrics forward_backward_with_metrics(const CausalLM& model, const MicroBatchInputs& batch,
                                             const ForwardOptions& forward, const Objective& objective,
                                             const at::Tensor& normaliser, const at::Tensor& loss_scale);

}  // namespace finetune
