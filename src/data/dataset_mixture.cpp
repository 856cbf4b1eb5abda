// Weighted mixtures of datasets (see dataset_mixture.h).
#include "finetune/data/dataset_mixture.h"

#include <cmath>
#include <cstdio>

#include "finetune/data/sampler.h"
#include "finetune/util/errors.h"

namespace finetune {

TokenizedDataset mix_datasets(std::vector<TokenizedDataset> parts, const std::vector<double>& weights, uint64_t seed) {
  if (weights.size() != parts.size()) {
    throw UsageError("--dataset_weights has " + std::to_string(weights.size()) + " weights for " +
                     std::to_string(parts.size()) + " datasets");
  }
  TokenizedDataset mixture;
  for (size_t d = 0; d < parts.size(); ++d) {
    const double weight = weights[d];
    if (!std::isfinite(weight) || weight < 0 || weight > 1e6) {
      char shown[32];  // %g: 1e+308, not std::to_string's 309 digits
      std::snprintf(shown, sizeof shown, "%g", weight);
      throw UsageError("--dataset_weights: weight " + std::to_string(d + 1) + " must be between 0 and 1e6, got " + shown);
    }
    std::vector<Sample>& samples = parts[d].samples;
    const auto rows = static_cast<int64_t>(samples.size());
    const auto copies = static_cast<int64_t>(std::floor(weight));
    const auto extra = static_cast<int64_t>(std::llround((weight - static_cast<double>(copies)) * static_cast<double>(rows)));
    for (int64_t c = 0; c < copies; ++c) mixture.samples.insert(mixture.samples.end(), samples.begin(), samples.end());
    if (extra > 0) {
      // A per-dataset stream of the seed: the same rows whatever the other datasets hold.
      const std::vector<int64_t> order = epoch_permutation(rows, seed + 0x9E3779B97F4A7C15ULL * (d + 1), -1);
      for (int64_t i = 0; i < extra; ++i) mixture.samples.push_back(samples[static_cast<size_t>(order[static_cast<size_t>(i)])]);
    }
    mixture.stats.add(parts[d].stats);
  }
  // rows_kept / tokens describe the mixture itself.
  mixture.stats.rows_kept = static_cast<int64_t>(mixture.samples.size());
  mixture.stats.tokens = 0;
  mixture.stats.trainable_tokens = 0;
  for (const Sample& sample : mixture.samples) {
    mixture.stats.tokens += static_cast<int64_t>(sample.input_ids.size());
    mixture.stats.trainable_tokens += trainable_token_count(sample);
  }
  return mixture;
}

}  // namespace finetune
