// ORPO on the objective seam (train/objective.h), as TRL 1.16's ORPOTrainer computes it
// (concatenated_forward, get_batch_loss_metrics): reference-free. The policy's log-prob AVERAGES
// over each completion (the trained positions of each row), and the NLL of the chosen rows over
// every real next token, prompt included (the mean over the micro-batch's chosen tokens), go into
// train/preference_loss.h's orpo_loss.
//
// Micro-batch contract: as DpoObjective's (train/dpo_objective.h): padded rows, one sample per row,
// the B chosen rows then the B rejected rows (data/preference_rows.h preference_batch_rows), rows
// from data/orpo_rows.h. loss_sum = the micro-batch loss x pairs, normalised by pairs.
#pragma once

#include <string>

#include "finetune/train/objective.h"
#include "finetune/train/preference_loss.h"

namespace finetune {

class OrpoObjective final : public Objective {
 public:
  explicit OrpoObjective(double beta) : beta_(beta) {}

  std::string name() const override { return "orpo"; }
  double normaliser_share(const HostBatch& batch) const override;  // pairs: rows / 2
  at::Tensor loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                      const ForwardOptions& forward) const override;
  // The NLL's targets are found on the device and counted on the host.
  bool graph_capturable() const override { return false; }

  // The micro-batch's loss with TRL's metrics.
  PreferenceLoss evaluate(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward) const;

 private:
  double beta_;
};

}  // namespace finetune
