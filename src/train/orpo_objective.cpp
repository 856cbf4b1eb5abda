// ORPO's micro-batch loss on the objective seam (see orpo_objective.h).
#include "finetune/train/orpo_objective.h"

#include "finetune/train/sequence_log_probs.h"

namespace finetune {

const std::vector<std::string>& orpo_metric_names() {
  static const std::vector<std::string> names = {
      "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/rejected",
      "logps/chosen",   "nll_loss",         "log_odds_ratio",     "log_odds_chosen"};
  return names;
}

PreferenceLoss OrpoObjective::evaluate(const CausalLM& model, const MicroBatchInputs& batch,
                                       const ForwardOptions& forward) const {
  const PairSequences sequences = pair_sequences(batch, "ORPO");
  const int64_t count = 2 * sequences.pairs;
  const at::Tensor hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);  // (R, T, C)
  const at::Tensor averages =
      sequence_log_prob_sums(model, hidden, batch.targets, sequences.sequence_of_target, count) /
      sequence_target_counts(sequences.sequence_of_target, count);  // (2B): get_batch_logps(average)
  const TokenTargets nll_targets =
      every_next_token_targets(batch.input_ids.slice(1, 0, sequences.chosen_columns),
                               batch.position_ids.slice(1, 0, sequences.chosen_columns), sequences.chosen_rows);
  const at::Tensor chosen_nll = -row_log_prob_sums(model, hidden, nll_targets).sum() /
                                static_cast<double>(nll_targets.positions.size(0));
  return orpo_loss(beta_, split_pairs(averages), chosen_nll);
}

}  // namespace finetune
