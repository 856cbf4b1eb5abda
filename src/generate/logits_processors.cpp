#include "finetune/generate/logits_processors.h"

#include <algorithm>
#include <limits>

namespace finetune {

at::Tensor apply_repetition_penalty(const at::Tensor& scores, const at::Tensor& sequences, double penalty) {
  auto score = at::gather(scores, 1, sequences);                                 // (B, L)
  score = at::where(score < 0, score * penalty, score / penalty);
  return scores.scatter(1, sequences, score);                                    // (B, V)
}

at::Tensor apply_temperature(const at::Tensor& scores, double temperature) { return scores / temperature; }

at::Tensor apply_top_k(const at::Tensor& scores, int64_t top_k) {
  const int64_t k = std::min(top_k, scores.size(-1));
  auto kth = std::get<0>(at::topk(scores, k)).narrow(-1, k - 1, 1);             // (B, 1)
  return scores.masked_fill(scores < kth, -std::numeric_limits<float>::infinity());
}

at::Tensor apply_top_p(const at::Tensor& scores, double top_p) {
  auto [sorted_logits, sorted_indices] = at::sort(scores, /*dim=*/-1, /*descending=*/false);  // (B, V) ascending
  auto cumulative_probs = sorted_logits.softmax(-1).cumsum(-1);
  auto sorted_to_remove = cumulative_probs <= (1 - top_p);
  sorted_to_remove.narrow(-1, sorted_to_remove.size(-1) - 1, 1).fill_(false);  // min_tokens_to_keep = 1
  auto to_remove = sorted_to_remove.scatter(1, sorted_indices, sorted_to_remove);
  return scores.masked_fill(to_remove, -std::numeric_limits<float>::infinity());
}

at::Tensor process_logits(const at::Tensor& scores, const at::Tensor& sequences, const GenerationConfig& config) {
  auto out = scores;
  if (config.repetition_penalty != 1.0) out = apply_repetition_penalty(out, sequences, config.repetition_penalty);
  if (!config.sampling()) return out;
  if (config.temperature != 1.0) out = apply_temperature(out, config.temperature);
  if (config.top_k != 0) out = apply_top_k(out, config.top_k);
  if (config.top_p < 1.0) out = apply_top_p(out, config.top_p);
  return out;
}

}  // namespace finetune
