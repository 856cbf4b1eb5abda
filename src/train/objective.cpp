#include "finetune/train/objective.h"

namespace finetune {

MicroBatchInputs micro_batch_inputs(const DeviceBatch& batch) {
  return {batch.input_ids, batch.position_ids, batch.mask, batch.targets(), batch.group_ids};
}

double CausalLmObjective::normaliser_share(const HostBatch& batch) const {
  return static_cast<double>(batch.trainable_tokens);
}

at::Tensor CausalLmObjective::loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                                       const ForwardOptions& forward) const {
  const auto hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);  // (B, T, C)
  return causal_lm_loss_sum(model, hidden, batch.targets);
}

}  // namespace finetune
