// DPO on the objective seam (train/objective.h), as TRL 1.16's DPOTrainer computes it for a PEFT
// model without a separate reference model: the policy's and the reference's log-prob sums over
// each completion (the trained positions of each row), then train/preference_loss.h's DPO loss.
// The reference is the same model with every adapter set aside (PEFT's disable_adapter), run
// under no_grad.
//
// Micro-batch contract (what the trainer's wiring must hand in): padded rows, one sample per row,
// the B chosen rows first and then the B rejected rows in the same pair order (TRL's
// [chosen, rejected] batch), labels -100 outside the completions (data/preference_rows.h).
// The loss is the mean over the micro-batch's pairs, so loss_sum = that mean x pairs and the
// normaliser counts pairs: equal to TRL's step loss when every micro-batch holds the same number
// of pairs (TRL averages the micro-batch means). ipo divides by each row's trained positions,
// which is TRL's completion token count unless a row's first token is a completion token (only
// keep_end truncation can do that: TRL counts it, though no position predicts it).
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "finetune/model/causal_lm.h"
#include "finetune/train/objective.h"
#include "finetune/train/preference_loss.h"
#include "finetune/train/sequence_log_probs.h"

namespace finetune {

class DpoObjective final : public Objective {
 public:
  // `model`: the policy, whose adapters are set aside for each reference forward.
  DpoObjective(DpoLossConfig config, CausalLM& model);

  std::string name() const override { return "dpo"; }
  double normaliser_share(const HostBatch& batch) const override;  // pairs: rows / 2
  at::Tensor loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                      const ForwardOptions& forward) const override;
  // The reference forward changes which adapters run: never inside a captured graph.
  bool graph_capturable() const override { return false; }

  // The micro-batch's loss (TRL's mean over pairs) with TRL's metrics.
  PreferenceLoss evaluate(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward) const;

 private:
  DpoLossConfig config_;
  CausalLM& model_;
};

}  // namespace finetune
