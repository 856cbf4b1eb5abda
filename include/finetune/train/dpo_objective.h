// DPO on the objective seam (train/objective.h, train/pair_objective.h), as TRL 1.16's DPOTrainer
// computes it for a PEFT model without a separate reference model: the policy's and the
// reference's log-prob sums over each completion (the trained positions of each sequence), then
// train/preference_loss.h's DPO loss. The reference is the same model with its adapters swapped
// for the reference's (train/reference_adapters.h: none, i.e. the base model, or a frozen copy of
// the starting adapter), run under no_grad without dropout.
//
// --precompute_ref_log_probs (TRL's precompute_ref_log_probs): precompute_reference() runs the
// reference over every pair once, before training, in batches of the micro-batch size, and from
// then on each micro-batch reads its pairs' values (by HostBatch::group_ids) instead of running
// the reference forward: the same numbers, without a second forward per step.
//
// Graphed micro-steps (train/micro_step_graphs.h) capture the reference forward with the policy's:
// swapping the adapters is a host-side step fixed at capture, and the reference's tensors stay
// where they are; precomputed values are looked up by the graph's pair slots' group ids.
//
// ipo divides by each sequence's trained positions, which is TRL's completion token count unless
// a row's first token is a completion token (only keep_end truncation can do that: TRL counts it,
// though no position predicts it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "finetune/data/sample.h"
#include "finetune/train/device_batch.h"

#include <ATen/ATen.h>

#include "finetune/model/causal_lm.h"
#include "finetune/train/pair_objective.h"
#include "finetune/train/preference_loss.h"
#include "finetune/train/reference_adapters.h"

namespace finetune {

// TRL's DPO metric names, in the order they are logged.
const std::vector<std::string>& dpo_metric_names();

class DpoObjective final : public PairObjective {
 public:
  // `model`: the policy, whose adapters are swapped for `reference`'s for each reference forward;
  // both must outlive the objective.
  DpoObjective(DpoLossConfig config, CausalLM& model, ReferenceAdapters& reference);
  // The reference is the base model (adapters set aside).
  DpoObjective(DpoLossConfig config, CausalLM& model);

  std::string name() const override { return "dpo"; }
  // Capturable when the reference's adapters are (LinearAdapter::cuda_graph_safe).
  bool graph_capturable() const override;
  std::vector<const LinearAdapter*> swapped_in_adapters() const override;  // the reference's
  PreferenceLoss evaluate(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward) const override;

  // The reference's log-prob sums of the micro-batch's chosen and rejected sequences: read from
  // the precomputed values when there are any, else computed by a reference forward.
  PairValues reference_log_probs(const MicroBatchInputs& batch, const PairSequences& sequences) const;

  // The reference's log-prob sums of every pair of `pair_rows` (data/preference_dataset.h
  // interleaved_pair_rows), `pairs_per_batch` pairs at a time in `layout`; kept for training.
  void precompute_reference(const std::vector<Sample>& pair_rows, int64_t pairs_per_batch, int64_t pad_token_id,
                            BatchLayout layout);
  bool reference_precomputed() const { return precomputed_.chosen.defined(); }

 private:
  PairValues reference_forward(const MicroBatchInputs& batch, const PairSequences& sequences) const;

  DpoLossConfig config_;
  CausalLM& model_;
  std::unique_ptr<ReferenceAdapters> base_model_;  // the reference when none is given
  ReferenceAdapters& reference_;
  PairValues precomputed_;  // (P) fp32 each, by pair index; undefined until precompute_reference
};

}  // namespace finetune
