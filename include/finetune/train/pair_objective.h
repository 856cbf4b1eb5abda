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
  int64_t pairs = 0;
  at::Tensor sequence_of_target;  // (N) int64: the sequence (0 .. 2B-1) of each trained position
  // The chosen sequences are the first chosen_columns columns of the first chosen_rows rows
  // (padded: B rows, all columns; padding-free: row 0 up to the first rejected sample).
  int64_t chosen_rows = 0;
  int64_t chosen_columns = 0;
};

// Error naming `objective` unless the micro-batch holds whole pairs in one of the two layouts.
PairSequences pair_sequences(const MicroBatchInputs& batch, const std::string& objective);

// (2B) per-sequence values -> the B chosen and the B rejected ones.
PairValues split_pairs(const at::Tensor& sequences);

class PairObjective : public Objective {
 public:
  double normaliser_share(const HostBatch& batch) const final;  // pairs: rows / 2 (padded rows)
  at::Tensor loss_sum(const CausalLM& model, const MicroBatchInputs& batch, const ForwardOptions& forward) const final;
  LossAndMetrics loss_and_metric_sums(const CausalLM& model, const MicroBatchInputs& batch,
                                      const ForwardOptions& forward) const final;
  std::vector<std::string> metric_names() const final { return metric_names_; }
  // The reference forward (DPO) and the NLL's targets (ORPO) read or change host state: never
  // inside a captured graph.
  bool graph_capturable() const final { return false; }

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
