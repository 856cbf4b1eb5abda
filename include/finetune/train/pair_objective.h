// The preference objectives' shared part (train/dpo_objective.h, train/orpo_objective.h).
//
// Micro-batch contract: B pairs as the B chosen rows, then the B rejected rows in the same pair
// order (TRL's [chosen, rejected] batch: data/micro_batch_stream.h with group_size 2), labels -100
// outside the completions (data/preference_rows.h, data/orpo_rows.h); laid out either as 2B
// padded rows (one sample per row) or as one padding-free row of 2B samples (the variable-length
// layout, train/device_batch.h).
//
// The loss is TRL's mean over the micro-batch's pairs, so loss_sum = that mean x B and the
// normaliser counts pairs: the step's loss is the pair-weighted mean of its micro-batch losses,
// TRL's step loss (the mean of its micro-batch losses) when every micro-batch holds the same
// number of pairs. Metrics keep TRL's names; a micro-batch contributes its TRL value x B, so a
// step's metric is likewise the pair-weighted mean of TRL's per-micro-batch values.
//
// Note [Filler pairs]
// A CUDA graph replays one fixed shape for micro-batches of different pair counts
// (train/graph_batch.h), so its micro-batch holds P >= B pair slots (MicroBatchInputs::pairs): the B
// pairs, then filler pairs without trained positions. A filler pair adds exactly nothing: its
// per-pair loss and metrics are masked out of every mean and sum (at::where, which also sends its
// gradient to 0), the means divide by B (a device scalar, RealPairs::count), and the filler
// values themselves are kept finite (log-prob sums 0, completion counts 1, ORPO's averages -1) so
// that no NaN enters the backward pass. The weight-0 trained positions of the graph's filler
// sample belong to no sequence (sequence 2P, dropped). Where the eager layouts take a mean over
// the B pairs, the slots divide a masked sum by B: the same to fp32 rounding (the summation order,
// and zeros added for filler pairs).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/train/objective.h"
#include "finetune/train/preference_loss.h"

namespace finetune {

// Where a micro-batch's sequences are.
struct PairSequences {
  int64_t pairs = 0;              // pair slots: the micro-batch's B pairs, or a graph's P (Note [Filler pairs])
  at::Tensor sequence_of_target;  // (N) int64: the sequence (0 .. 2P-1) of each trained position; 2P: none
  // The chosen sequences are the first chosen_columns columns of the first chosen_rows rows
  // (padded: B rows, all columns; padding-free: row 0 up to the first rejected sample). Not set
  // for a graph's pair slots.
  int64_t chosen_rows = 0;
  int64_t chosen_columns = 0;
  RealPairs real;                 // all, except a graph's filler pairs
};

// Error naming `objective` unless the micro-batch holds whole pairs in one of the two layouts (or
// comes with a graph's pair slots).
PairSequences pair_sequences(const MicroBatchInputs& batch, const std::string& objective);

// (2P) per-sequence values -> the P chosen and the P rejected ones.
PairValues split_pairs(const at::Tensor& sequences);

// The log-prob sums of each pair slot's sequences over their trained positions (0 for filler pairs):
// sequence_log_prob_sums (train/sequence_log_probs.h), split.
PairValues pair_log_prob_sums(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets,
                              const PairSequences& sequences);
// The trained positions of each pair slot's sequences (1 for filler pairs), as fp32.
PairValues pair_target_counts(const PairSequences& sequences);
// `values` with each filler pair's replaced by `filler` (unchanged without filler pairs).
PairValues with_filler_value(const PairValues& values, const RealPairs& real, double filler);

class PairObjective : public Objective {
 public:
  double normaliser_share(const HostBatch& batch) const final;  // pairs: rows / 2 (padded rows)
  at::Tensor loss_sum(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward) const final;
  LossAndMetrics loss_and_metric_sums(const CausalLM& model, const MicroBatchInputs& batch,
                                      const ForwardOptions& forward) const final;
  std::vector<std::string> metric_names() const final { return metric_names_; }
  // Graphed micro-steps read the pairs from the graph's pair slots (Note [Filler pairs]).
  bool graph_capturable() const override { return true; }
  GraphSections graph_sections() const override { return {/*pairs=*/true, /*chosen_next_tokens=*/false}; }

  // The micro-batch's loss (TRL's mean over its pairs) with TRL's metrics.
  virtual PreferenceLoss evaluate(const CausalLM& model, const MicroBatchInputs& batch,
                                  const ForwardOptions& forward) const = 0;

 protected:
  // The metrics evaluate() returns, in the order they are logged.
  explicit PairObjective(std::vector<std::string> metric_names) : metric_names_(std::move(metric_names)) {}

 private:
  std::vector<std::string> metric_names_;
};

}  // namespace finetune
