// Epoch permutations, per-rank index streams and micro-batches (see sampler.h).
#include "finetune/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "finetune/data/rank_assignment.h"
#include "finetune/util/errors.h"
#include "finetune/util/splitmix64.h"

namespace finetune {
namespace {

// Uniform integer in [0, range) by rejection: values below 2^64 mod range are redrawn, so every
// residue is equally likely. std::uniform_int_distribution is avoided because its algorithm
// differs between standard libraries; mt19937_64's output sequence is fixed by the standard.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t range) {
  const uint64_t threshold = (0 - range) % range;  // 2^64 mod range
  for (;;) {
    const uint64_t draw = rng();
    if (draw >= threshold) return draw % range;
  }
}

std::vector<int64_t> identity_order(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) throw Error("epoch_permutation: negative sample count " + std::to_string(n));
  std::vector<int64_t> order = identity_order(n);
  std::mt19937_64 rng(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<int64_t> epoch_order(const SamplerConfig& config, int64_t epoch) {
  if (config.num_samples < 0) throw Error("sampler: negative num_samples " + std::to_string(config.num_samples));
  return config.shuffle ? epoch_permutation(config.num_samples, config.seed, epoch) : identity_order(config.num_samples);
}

std::vector<int64_t> rank_indices(const SamplerConfig& config, int64_t epoch) {
  if (config.world_size < 1) throw Error("sampler: world_size must be >= 1, got " + std::to_string(config.world_size));
  if (config.rank < 0 || config.rank >= config.world_size) {
    throw Error("sampler: rank " + std::to_string(config.rank) + " outside [0, " +
                std::to_string(config.world_size) + ")");
  }
  return rank_share(epoch_order(config, epoch), config.world_size, config.rank,
                    config.drop_last ? RankPadding::drop_remainder : RankPadding::wrap_around);
}

std::vector<std::vector<int64_t>> micro_batches(const std::vector<int64_t>& indices, int64_t batch_size,
                                                bool group_by_length, const std::vector<int64_t>& lengths,
                                                bool drop_last) {
  if (batch_size < 1) throw Error("micro_batches: batch_size must be >= 1, got " + std::to_string(batch_size));
  std::vector<int64_t> order = indices;
  if (group_by_length) {
    for (int64_t index : order) {
      if (index < 0 || index >= static_cast<int64_t>(lengths.size())) {
        throw Error("micro_batches: no length for sample index " + std::to_string(index) + " (have " +
                    std::to_string(lengths.size()) + " lengths)");
      }
    }
    // Longest first within each window ("megabatch"), stable so ties keep their shuffled order.
    const size_t window = static_cast<size_t>(batch_size) * 50;
    for (size_t begin = 0; begin < order.size(); begin += window) {
      const auto first = order.begin() + static_cast<std::ptrdiff_t>(begin);
      const auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), begin + window));
      std::stable_sort(first, last, [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
    }
  }

  std::vector<std::vector<int64_t>> batches;
  for (size_t begin = 0; begin < order.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(order.size(), begin + static_cast<size_t>(batch_size));
    if (drop_last && end - begin < static_cast<size_t>(batch_size)) break;
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(begin),
                         order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return batches;
}

}  // namespace finetune
