#include "finetune/train/objective.h"

#include "finetune/model/moe_block.h"
#include "finetune/util/errors.h"

namespace finetune {

MicroBatchInputs micro_batch_inputs(const DeviceBatch& batch) {
  return {batch.input_ids, batch.position_ids, batch.mask, batch.targets(), batch.real_token_mask, batch.group_ids,
          PairSlots{}};
}

bool adds_router_loss(const ModelConfig& config) {
  return config.moe && config.moe->output_router_logits && config.moe->router_aux_loss_coef > 0;
}

CausalLmLoss causal_lm_forward_loss(const CausalLM& model, const MicroBatchInputs& batch,
                                    const ForwardOptions& forward, LmHeadLoss tiling) {
  CausalLmLoss out;
  if (!adds_router_loss(model.config())) {
    out.hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);  // (B, T, C)
    out.loss_sum = causal_lm_loss_sum(model, out.hidden, batch.targets, tiling);
    return out;
  }
  // Note [Router load-balancing loss]
  std::vector<at::Tensor> router_logits;
  ForwardOptions with_router = forward;
  with_router.router_logits = &router_logits;
  // A recompute would run the routers again in backward, after their logits were read: the
  // layers of a model with this loss keep their activations (README, mixture-of-experts).
  with_router.gradient_checkpointing = false;
  out.hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, with_router);  // (B, T, C)
  const auto& moe = *model.config().moe;
  const auto aux = load_balancing_loss(router_logits, moe.num_experts, moe.num_experts_per_tok, batch.token_mask);
  const auto loss_sum = causal_lm_loss_sum(model, out.hidden, batch.targets, tiling);
  if (batch.targets.weights.defined()) {
    // Weighted rows (a graph's weight-0 filler rows): the trained count is their weights' sum, on
    // the device, so a replayed graph reads no host value.
    const auto trained = batch.targets.weights.sum();  // fp32 scalar
    out.aux_loss_sum = aux.detach().to(at::kDouble) * trained.to(at::kDouble);
    out.loss_sum = loss_sum + aux * trained * moe.router_aux_loss_coef;
    return out;
  }
  const auto trained = static_cast<double>(batch.targets.positions.numel());
  out.aux_loss_sum = aux.detach().to(at::kDouble) * trained;
  out.loss_sum = loss_sum + aux * (moe.router_aux_loss_coef * trained);
  return out;
}

CausalLmObjective::CausalLmObjective(const ModelConfig& config, LmHeadLoss tiling)
    : router_loss_(adds_router_loss(config)), tiling_(tiling) {}

double CausalLmObjective::normaliser_share(const HostBatch& batch) const {
  return static_cast<double>(batch.trainable_tokens);
}

at::Tensor CausalLmObjective::loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                                       const ForwardOptions& forward) const {
  return causal_lm_forward_loss(model, batch, forward, tiling_).loss_sum;
}

std::vector<std::string> CausalLmObjective::metric_names() const {
  if (router_loss_) return {"aux_loss"};
  return {};
}

LossAndMetrics CausalLmObjective::loss_and_metric_sums(const CausalLM& model, const MicroBatchInputs& batch,
                                                       const ForwardOptions& forward) const {
  const CausalLmLoss loss = causal_lm_forward_loss(model, batch, forward, tiling_);
  if (router_loss_ != loss.aux_loss_sum.defined()) {
    throw Error("causal_lm objective: built for a model " + std::string(router_loss_ ? "with" : "without") +
                " the router load-balancing loss, run on one " + (router_loss_ ? "without" : "with"));
  }
  return {loss.loss_sum, router_loss_ ? loss.aux_loss_sum.reshape({1}) : at::Tensor()};
}

}  // namespace finetune
