// A host-side batch, laid out so that packing (several samples per row) needs no change in the
// trainer: every row carries its samples' lengths, and position ids restart at each sample.
// Unpacked batches are the special case of one sample per row, right-padded.
#pragma once

#include <cstdint>
#include <vector>

#include "finetune/data/sample.h"

namespace finetune {

struct HostBatch {
  int64_t rows = 0;
  int64_t seq_len = 0;                           // padded row length
  std::vector<int64_t> input_ids;                // rows * seq_len, padded with pad_token_id
  std::vector<int64_t> labels;                   // rows * seq_len, -100 on padding
  std::vector<int64_t> position_ids;             // rows * seq_len, restart at 0 per sample
  std::vector<std::vector<int64_t>> sample_lengths;  // per row, the lengths of its samples
  int64_t trainable_tokens = 0;                  // positions that enter the loss (after shift)
  int64_t real_tokens = 0;                       // non-padding tokens
  // Micro-batches of units (data/micro_batch_stream.h, group_size > 1: preference pairs): each
  // unit's index, in the order its rows appear; empty otherwise.
  std::vector<int64_t> group_ids;
};

// Right-pads one sample per row.
HostBatch collate(const std::vector<Sample>& samples, const std::vector<int64_t>& indices, int64_t pad_token_id);

// Several samples per row (rows[r] lists the samples of row r, in order), right-padded. Position
// ids restart at every sample, and each later sample's first label is -100: it would otherwise be
// predicted from the previous sample's last token. The loss therefore equals the unpacked loss.
HostBatch collate_rows(const std::vector<Sample>& samples, const std::vector<std::vector<int64_t>>& rows,
                       int64_t pad_token_id);

// The same tokens as one row with no padding at all (sample lengths kept): the layout for
// variable-length attention, where padding costs nothing.
HostBatch flatten(const HostBatch& batch);

// Packs samples into rows of at most `capacity` tokens, best-fit decreasing: longest first, each
// into the fullest row it still fits (ties: the earlier row). Rows come out nearly full, so ranks
// that each take one row per micro-batch do nearly equal work. Deterministic; within a row the
// samples keep the order in which they were placed.
std::vector<std::vector<int64_t>> pack_samples(const std::vector<int64_t>& order, const std::vector<int64_t>& lengths,
                                               int64_t capacity);

}  // namespace finetune
