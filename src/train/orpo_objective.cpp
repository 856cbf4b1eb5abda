// ORPO's micro-batch loss on the objective seam (see orpo_objective.h).
#include "finetune/train/orpo_objective.h"

#include "finetune/train/sequence_log_probs.h"
#include "finetune/util/errors.h"

namespace finetune {

double OrpoObjective::normaliser_share(const HostBatch& batch) const { return static_cast<double>(batch.rows / 2); }

at::Tensor OrpoObjective::loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                                   const ForwardOptions& forward) const {
  const int64_t pairs = batch.input_ids.size(0) / 2;
  return evaluate(model, batch, forward).loss * static_cast<double>(pairs);
}

PreferenceLoss OrpoObjective::evaluate(const CausalLM& model, const MicroBatchInputs& batch,
                                       const ForwardOptions& forward) const {
  const int64_t rows = batch.input_ids.size(0), seq_len = batch.input_ids.size(1);
  if (rows == 0 || rows % 2 != 0) {
    throw Error("ORPO micro-batch must hold the chosen rows then the rejected rows of its pairs, got " +
                std::to_string(rows) + " rows");
  }
  const at::Tensor hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);  // (2B, T, C)
  const at::Tensor averages = row_log_prob_sums(model, hidden, batch.targets) /
                              row_target_counts(batch.targets, rows, seq_len);  // (2B): get_batch_logps(average)
  const auto halves = averages.chunk(2, 0);
  const TokenTargets nll_targets = every_next_token_targets(batch.input_ids, batch.position_ids, rows / 2);
  const at::Tensor chosen_nll = -row_log_prob_sums(model, hidden, nll_targets).sum() /
                                static_cast<double>(nll_targets.positions.size(0));
  return orpo_loss(beta_, {halves[0], halves[1]}, chosen_nll);
}

}  // namespace finetune
