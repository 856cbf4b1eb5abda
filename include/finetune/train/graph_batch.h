// The fixed-shape layout of a micro-step that a CUDA graph replays (Note [Graphed micro-steps] in
// train/micro_step_graphs.h): host-side and pure, so it is unit-tested on the CPU.
//
// A flattened batch (data/batch.h flatten(): one row, samples back to back) of n tokens is padded
// to a token bucket with one filler sample of label-free tokens (no tokens when n fills the bucket
// exactly: a full packed row of 2048 takes the 2048 bucket), its k trained positions to a
// target bucket with weight-0 rows, and its sample count to a sample bucket with empty samples
// (repeated ends in cu_seqlens). Variable-length flash attention keeps the filler sample apart
// (it is a sample of its own in cu_seqlens) and skips empty ones, and a weight-0 row adds nothing
// to the loss or the gradient, so the padded micro-step trains exactly what the unpadded one does.
//
// Preference objectives (GraphSections, train/objective.h) also get their pairs as PairSlots: the
// B pairs padded to a pair bucket with filler pairs (Note [Filler pairs] in train/pair_objective.h),
// each trained position's sequence, the pairs' group ids and, for ORPO, every next token of the
// chosen samples padded to a bucket with filler rows.
//
// Note [Each rank its own shape]
// A rank buckets its own micro-batch, whatever the other ranks' micro-batches of the same step
// hold: the collectives run outside the graphs, the same ones in the same order whatever the
// shapes, so the shapes need not agree. Padding a rank to another's larger bucket (as finetune once did) only
// added work; measured on 2 H200s (Qwen3-8B, packed 1 x 2,048), a row whose sample bucket doubled
// that way spent ~1 ms more of its ~190 ms step in attention, since variable-length flash
// attention launches its blocks for every sample slot, empty ones included.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/data/batch.h"
#include "finetune/train/objective.h"

namespace finetune {

// The smallest bucket >= count: a multiple of 64, and above 1023 of 1/8 of the power of two
// below count (so padding costs at most 64 tokens, or 12.5%).
int64_t graph_bucket(int64_t count);

// The smallest power of two >= count, at least 8: the samples a graph's cu_seqlens holds, so
// that micro-batches of a few samples more or less share a graph.
int64_t graph_sample_bucket(int64_t count);

// The smallest power of two >= length, at least 64, at most tokens: the bound a graph gives its
// samples' lengths (GraphShape::longest).
int64_t graph_longest_bucket(int64_t length, int64_t tokens);

// The smallest power of two >= pairs: the pair slots of a preference micro-batch (1 pair: 1).
int64_t graph_pair_bucket(int64_t pairs);

// What a captured graph is specialised to: its static buffers' sizes.
struct GraphShape {
  int64_t tokens = 0;   // the padded row: real tokens + filler (>= 0 filler tokens)
  int64_t targets = 0;  // trained positions, padded with weight-0 rows
  int64_t samples = 0;  // real samples + the filler + empty samples: graph_sample_bucket
  int64_t pairs = 0;    // GraphSections::pairs: pair slots (graph_pair_bucket); else 0
  int64_t chosen_next_tokens = 0;  // GraphSections::chosen_next_tokens: graph_bucket of them; else 0
  // Bounds every sample's length and the filler's: attention's max_seqlen, which sizes its launch
  // grid (blocks of 128 positions for every sample slot, the empty ones too). graph_longest_bucket
  // of the longest sample or filler: beyond kCudaGraphMaxTokens always; up to it where that is at
  // most a quarter of the row, else the row's tokens (a bound of the whole row launches mostly idle
  // blocks, but a bound per power of two multiplies a short row's shapes for little).
  int64_t longest = 0;
  auto key() const { return std::tie(tokens, targets, samples, pairs, chosen_next_tokens, longest); }
  bool operator<(const GraphShape& other) const { return key() < other.key(); }
  bool operator==(const GraphShape& other) const { return key() == other.key(); }
};

// The static input of one micro-step, as one int64 buffer (one host->device copy), laid out as
//   input_ids [tokens] | position_ids [tokens] | target_positions [targets] | target_ids [targets]
//   | target_weights [targets] (0 or 1) | cu_seqlens [samples + 1] | real_tokens [1]
// then with GraphSections::pairs (PairSlots' fields, in its order)
//   | sequence_of_target [targets] | group_ids [pairs] | real [pairs] (0 or 1) | count [1]
// and with GraphSections::chosen_next_tokens
//   | positions [C] | ids [C] | filler [C] (0 or 1) | count [1]        C = chosen_next_tokens
struct GraphBatch {
  GraphShape shape;
  std::vector<int64_t> values;
  int64_t trainable_tokens = 0;  // the real batch's (the filler adds none)
  int64_t real_tokens = 0;
};

// The shape graph_batch gives `batch` once flattened (any layout: flattening keeps its tokens,
// samples and trained positions). With sections.pairs its samples are pairs' (train/pair_objective.h).
GraphShape graph_shape(const HostBatch& batch, GraphSections sections = {});

// flat: a flattened batch (rows == 1). filler_token_id: any id of the vocabulary. With
// sections.pairs: the B chosen samples then the B rejected ones, with the B pairs' group_ids
// (flatten() drops them: copy them from the collated batch).
GraphBatch graph_batch(const HostBatch& flat, int64_t filler_token_id, GraphSections sections = {});

// The parts of a GraphBatch's buffer (on any device), as the micro-step reads them.
struct GraphInputs {
  at::Tensor input_ids;         // (1, tokens) int64
  at::Tensor position_ids;      // (1, tokens) int64
  at::Tensor target_positions;  // (targets) int64
  at::Tensor target_ids;        // (targets) int64
  at::Tensor target_weights;    // (targets) fp32, 0 or 1
  at::Tensor cu_seqlens;        // (samples + 1) int32
  at::Tensor real_tokens;       // () int64: the tokens before the filler
  PairSlots pairs;              // shape.pairs > 0; chosen_next_tokens when shape.chosen_next_tokens > 0
};
GraphInputs graph_inputs(const at::Tensor& buffer, const GraphShape& shape);

// (tokens) fp32: 1 at the real tokens of a graph's row, 0 at its filler sample's, computed on the
// device from the row's real_tokens (a graph replays it for every batch of its shape).
at::Tensor filler_free_token_mask(const at::Tensor& real_tokens, int64_t tokens);

// The micro-batch the objective reads from a graph's inputs: variable-length attention over
// cu_seqlens (max_seqlen: the shape's longest, which bounds every sample), the weighted targets, the
// token mask without the filler (the router loss counts real tokens only), the pairs.
MicroBatchInputs graph_micro_batch(const GraphInputs& in, const GraphShape& shape);

}  // namespace finetune
