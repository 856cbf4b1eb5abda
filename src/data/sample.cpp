// Counting what a sample contributes to the causal-LM loss.
#include "finetune/data/sample.h"

#include <cstddef>

namespace finetune {

int64_t trainable_token_count(const Sample& sample) {
  // Position 0 is never a target: the loss pairs logits at t-1 with labels at t.
  int64_t count = 0;
  for (size_t t = 1; t < sample.labels.size(); ++t) {
    if (sample.labels[t] != kIgnoreIndex) ++count;
  }
  return count;
}

}  // namespace finetune
