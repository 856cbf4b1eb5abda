// Several datasets trained on together (--dataset a,b --dataset_weights 2,0.5): each dataset's
// samples appear `weight` times per epoch: floor(weight) full copies plus a seeded random subset
// of round(fraction x rows) of its samples (sampling without replacement). Weight 1 (the
// default) keeps a dataset as it is; 0 leaves it out. The mixture is shuffled later by the sampler
// like any dataset.
#pragma once

#include <cstdint>
#include <vector>

#include "finetune/data/dataset.h"

namespace finetune {

// Throws UsageError when the counts differ or a weight is negative or not finite.
TokenizedDataset mix_datasets(std::vector<TokenizedDataset> parts, const std::vector<double>& weights, uint64_t seed);

}  // namespace finetune
