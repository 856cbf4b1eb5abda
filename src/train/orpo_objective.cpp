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

namespace {

// The mean NLL of every next token of the chosen sequences: located on the device in the eager
// layouts, read from a graph's pair slots (their filler rows dropped) when graphed.
at::Tensor chosen_nll(const CausalLM& model, const at::Tensor& hidden, const MicroBatchInputs& batch,
                      const PairSequences& sequences) {
  const PairSlots& slots = batch.pairs;
  if (slots.chosen_next_tokens.positions.defined()) {
    const at::Tensor sums =
        sequence_log_prob_sums(model, hidden, slots.chosen_next_tokens, slots.chosen_next_token_filler, 2);
    return -sums[0] / slots.chosen_next_token_count;
  }
  const TokenTargets nll_targets =
      every_next_token_targets(batch.input_ids.slice(1, 0, sequences.chosen_columns),
                               batch.position_ids.slice(1, 0, sequences.chosen_columns), sequences.chosen_rows);
  return -row_log_prob_sums(model, hidden, nll_targets).sum() / static_cast<double>(nll_targets.positions.size(0));
}

}  // namespace

PreferenceLoss OrpoObjective::evaluate(const CausalLM& model, const MicroBatchInputs& batch,
                                       const ForwardOptions& forward) const {
  const PairSequences sequences = pair_sequences(batch, "ORPO");
  const at::Tensor hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);  // (R, T, C)
  const PairValues sums = pair_log_prob_sums(model, hidden, batch.targets, sequences);
  const PairValues counts = pair_target_counts(sequences);
  // get_batch_logps(average); a filler pair's -1 keeps log1mexp finite (Note [Filler pairs]).
  const PairValues averages =
      with_filler_value({sums.chosen / counts.chosen, sums.rejected / counts.rejected}, sequences.real, -1.0);
  return orpo_loss(beta_, averages, chosen_nll(model, hidden, batch, sequences), sequences.real);
}

}  // namespace finetune
