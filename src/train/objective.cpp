#include "finetune/train/objective.h"

#include "finetune/model/moe_block.h"

namespace finetune {

MicroBatchInputs micro_batch_inputs(const DeviceBatch& batch) {
  return {batch.input_ids, batch.position_ids, batch.mask, batch.targets(), batch.real_token_mask, batch.group_ids};
}

namespace {

bool adds_router_loss(const ModelConfig& config, const ForwardOptions& forward) {
  return forward.training && config.moe && config.moe->output_router_logits && config.moe->router_aux_loss_coef > 0;
}

}  // namespace

double CausalLmObjective::normaliser_share(const HostBatch& batch) const {
  return static_cast<double>(batch.trainable_tokens);
}

at::Tensor CausalLmObjective::loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                                       const ForwardOptions& forward) const {
  if (!adds_router_loss(model.config(), forward)) {
    const auto hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);  // (B, T, C)
    return causal_lm_loss_sum(model, hidden, batch.targets);
  }
  // Note [Router load-balancing loss]
  std::vector<at::Tensor> router_logits;
  ForwardOptions with_router = forward;
  with_router.router_logits = &router_logits;
  // A recompute would run the routers again in backward, after their logits were read: the
  // layers of a model with this loss keep their activations (README, mixture-of-experts).
  with_router.gradient_checkpointing = false;
  const auto hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, with_router);
  const auto& moe = *model.config().moe;
  const auto aux = load_balancing_loss(router_logits, moe.num_experts, moe.num_experts_per_tok, batch.token_mask);
  const auto trained = static_cast<double>(batch.targets.positions.numel());
  const auto term = aux.detach().to(at::kDouble) * trained;
  auxiliary_loss_sum_ = auxiliary_loss_sum_.defined() ? auxiliary_loss_sum_ + term : term;
  return causal_lm_loss_sum(model, hidden, batch.targets) + aux * (moe.router_aux_loss_coef * trained);
}

bool CausalLmObjective::adds_auxiliary_loss(const CausalLM& model, const ForwardOptions& forward) const {
  return adds_router_loss(model.config(), forward);
}

at::Tensor CausalLmObjective::take_auxiliary_loss_sum() const {
  auto sum = auxiliary_loss_sum_;
  auxiliary_loss_sum_ = at::Tensor();
  return sum;
}

}  // namespace finetune
