// Counting what a sample contributes to the causal-LM loss.
#include "finetune/data/sample.h"

namespace finetune {

int64_t trainable_token_count(const Sample& sample) {
  return count_targets(sample.labels.data(), static_cast<int64_t>(sample.labels.size()));
}

}  // namespace finetune
