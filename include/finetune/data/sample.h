// A tokenized training/eval sample. `labels` are aligned with `input_ids` (unshifted, as in HF:
// the loss compares logits at t with labels at t+1); -100 marks tokens that are not trained on.
#pragma once

#include <cstdint>
#include <vector>

namespace finetune {

constexpr int32_t kIgnoreIndex = -100;

struct Sample {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
};

// Number of positions that contribute to the causal-LM loss: labels[t] != -100 for t >= 1.
int64_t trainable_token_count(const Sample& sample);

}  // namespace finetune
