// ORPO on the objective seam (train/objective.h, train/pair_objective.h), as TRL 1.16's
// ORPOTrainer computes it (concatenated_forward, get_batch_loss_metrics): reference-free. The
// policy's log-prob AVERAGES over each completion (the trained positions of each sequence), and
// the NLL of the chosen sequences over every real next token, prompt included (the mean over the
// micro-batch's chosen tokens), go into train/preference_loss.h's orpo_loss. Rows come from
// data/orpo_rows.h. The NLL is a token mean over the micro-batch, so unlike DPO's loss the step's
// loss depends on which pairs share a micro-batch (as TRL's does). A graphed micro-step reads the
// NLL's targets from the graph's pair slots (PairSlots::chosen_next_tokens) instead of locating
// them on the device (which reads their count back).
#pragma once

#include <string>

#include "finetune/train/pair_objective.h"
#include "finetune/train/preference_loss.h"

namespace finetune {

// TRL's ORPO metric names, in the order they are logged.
const std::vector<std::string>& orpo_metric_names();

class OrpoObjective final : public PairObjective {
 public:
  explicit OrpoObjective(double beta) : PairObjective(orpo_metric_names()), beta_(beta) {}

  std::string name() const override { return "orpo"; }
  GraphSections graph_sections() const override { return {/*pairs=*/true, /*chosen_next_tokens=*/true}; }
  PreferenceLoss evaluate(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward) const override;

 private:
  double beta_;
};

}  // namespace finetune
