// Per-sequence log-probabilities for the preference objectives (train/dpo_objective.h,
// train/orpo_objective.h), on padded rows with one sample per row (Note [Next-token targets] in
// data/sample.h).
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "finetune/model/causal_lm.h"
#include "finetune/train/loss.h"

namespace finetune {

// Sum of log p(target) over each row's trained positions: hidden (B, T, C) -> (B) fp32,
// differentiable. The LM head runs on the trained positions only, logit_chunk_rows at a time.
at::Tensor row_log_prob_sums(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets);

// The same per sequence: `sequence_of_target` (N) int64 names the sequence of each target, of
// `sequences` (padded rows: the row; a padding-free row: the sample).
at::Tensor sequence_log_prob_sums(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets,
                                  const at::Tensor& sequence_of_target, int64_t sequences);

// Number of trained positions of each row: (B) fp32, on the targets' device.
at::Tensor row_target_counts(const TokenTargets& targets, int64_t rows, int64_t seq_len);
// ... of each sequence (as sequence_log_prob_sums).
at::Tensor sequence_target_counts(const at::Tensor& sequence_of_target, int64_t sequences);

// Every non-padding position of rows [0, rows) whose next token is real, with that token as its
// target, whatever the labels say: transformers' loss with labels = input_ids where the attention
// mask is set (ORPO's NLL term). Padding is found from position_ids (0 past a row's end).
// input_ids, position_ids: (B, T) int64. Reads the count back to the host.
TokenTargets every_next_token_targets(const at::Tensor& input_ids, const at::Tensor& position_ids, int64_t rows);

}  // namespace finetune
