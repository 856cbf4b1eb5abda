// Which samples go into which micro-batch on which rank. Pure functions, LibTorch-free.
//
// DistributedSampler semantics: one permutation per epoch from (seed, epoch), identical on every
// rank, dealt to the ranks by the one rank rule (Note [One rule for ranks], rank_assignment.h):
// padded by wrapping around to a multiple of world_size, or truncated with drop_last; rank r takes
// positions r, r + world, r + 2*world, ... so ranks see disjoint samples and the union over ranks
// of one step's micro-batches is exactly what one process with world x batch would see.
#pragma once

#include <cstdint>
#include <vector>

#include "finetune/data/sample.h"

namespace finetune {

// Deterministic, platform-independent permutation of [0, n) (own Fisher-Yates over mt19937_64).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

struct SamplerConfig {
  int64_t num_samples = 0;
  int world_size = 1;
  int rank = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
};

// The epoch's order of all samples, before it is dealt to the ranks (the same on every rank): a
// permutation from (seed, epoch) with shuffle, else 0, 1, 2, ...
std::vector<int64_t> epoch_order(const SamplerConfig& config, int64_t epoch);

// The sample indices this rank visits in `epoch`, in order: its share of epoch_order.
std::vector<int64_t> rank_indices(const SamplerConfig& config, int64_t epoch);

// Splits a rank's index stream into micro-batches of `batch_size` (the last one may be short
// unless drop_last). With group_by_length, indices are sorted by length within windows of
// batch_size*50 (like HF's LengthGroupedSampler's megabatches) to cut padding, deterministically.
std::vector<std::vector<int64_t>> micro_batches(const std::vector<int64_t>& indices, int64_t batch_size,
                                                bool group_by_length, const std::vector<int64_t>& lengths,
                                                bool drop_last);

}  // namespace finetune
