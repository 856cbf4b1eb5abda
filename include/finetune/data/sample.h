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

// Note [Next-token targets]
// Position t's logits are trained on labels[t + 1] (the shift inside transformers'
// ForCausalLMLoss): the label at index i >= 1 is the target of position i - 1, and a row's first
// label is never a target. Every place that pairs positions with targets goes through these.
constexpr int64_t kTargetShift = 1;

// The position whose logits are trained on labels[label_index] (label_index >= kTargetShift).
constexpr int64_t position_trained_on(int64_t label_index) { return label_index - kTargetShift; }

// Calls visit(position, target) for every trained position of one row of `length` labels, in
// position order (positions relative to the row's start).
template <typename Label, typename Visit>
void for_each_target(const Label* labels, int64_t length, Visit&& visit) {
  for (int64_t i = kTargetShift; i < length; ++i) {
    if (labels[i] != kIgnoreIndex) visit(position_trained_on(i), static_cast<int64_t>(labels[i]));
  }
}

// The number of trained positions of one row of `length` labels.
template <typename Label>
int64_t count_targets(const Label* labels, int64_t length) {
  int64_t count = 0;
  for_each_target(labels, length, [&count](int64_t, int64_t) { ++count; });
  return count;
}

// Number of positions that contribute to the causal-LM loss (Note [Next-token targets]).
int64_t trainable_token_count(const Sample& sample);

}  // namespace finetune
