// The fixed-shape layout of a micro-step that a CUDA graph replays (Note [Graphed micro-steps] in
// train/micro_step_graphs.h): host-side and pure, so it is unit-tested on the CPU.
//
// A flattened batch (data/batch.h flatten(): one row, samples back to back) of n tokens is padded
// to a token bucket with one filler sample of label-free tokens, its k trained positions to a
// target bucket with weight-0 rows, and its sample count to a sample bucket with empty samples
// (repeated ends in cu_seqlens). Variable-length flash attention keeps the filler sample apart
// (it is a sample of its own in cu_seqlens) and skips empty ones, and a weight-0 row adds nothing
// to the loss or the gradient, so the padded micro-step trains exactly what the unpadded one does.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/data/batch.h"

namespace finetune {

// The smallest bucket >= count: a multiple of 64, and above 1023 of 1/8 of the power of two
// below count (so padding costs at most 64 tokens, or 12.5%).
int64_t graph_bucket(int64_t count);

// The smallest power of two >= count, at least 8: the samples a graph's cu_seqlens holds, so
// that micro-batches of a few samples more or less share a graph.
int64_t graph_sample_bucket(int64_t count);

// What a captured graph is specialised to: its static buffers' sizes.
struct GraphShape {
  int64_t tokens = 0;   // the padded row: real tokens + filler (>= 1 filler token)
  int64_t targets = 0;  // trained positions, padded with weight-0 rows
  int64_t samples = 0;  // real samples + the filler + empty samples: graph_sample_bucket
  auto key() const { return std::tie(tokens, targets, samples); }
  bool operator<(const GraphShape& other) const { return key() < other.key(); }
  bool operator==(const GraphShape& other) const { return key() == other.key(); }
};

// The static input of one micro-step, as one int64 buffer (one host->device copy), laid out as
//   input_ids [tokens] | position_ids [tokens] | target_positions [targets] | target_ids [targets]
//   | target_weights [targets] (0 or 1) | cu_seqlens [samples + 1]
struct GraphBatch {
  GraphShape shape;
  std::vector<int64_t> values;
  int64_t trainable_tokens = 0;  // the real batch's (the filler adds none)
  int64_t real_tokens = 0;
};

// The shape graph_batch gives `batch` once flattened (any layout: flattening keeps its tokens,
// samples and trained positions).
GraphShape graph_shape(const HostBatch& batch);

// flat: a flattened batch (rows == 1). filler_token_id: any id of the vocabulary.
GraphBatch graph_batch(const HostBatch& flat, int64_t filler_token_id);

// The parts of a GraphBatch's buffer (on any device), as the micro-step reads them.
struct GraphInputs {
  at::Tensor input_ids;         // (1, tokens) int64
  at::Tensor position_ids;      // (1, tokens) int64
  at::Tensor target_positions;  // (targets) int64
  at::Tensor target_ids;        // (targets) int64
  at::Tensor target_weights;    // (targets) fp32, 0 or 1
  at::Tensor cu_seqlens;        // (samples + 1) int32
};
GraphInputs graph_inputs(const at::Tensor& buffer, const GraphShape& shape);

}  // namespace finetune
