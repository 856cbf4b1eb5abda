// Per-sequence log-probabilities (see sequence_log_probs.h).
#include "finetune/train/sequence_log_probs.h"

#include <algorithm>
#include <vector>

namespace finetune {

at::Tensor row_log_prob_sums(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets) {
  const int64_t rows = hidden.size(0), seq_len = hidden.size(1);
  return sequence_log_prob_sums(model, hidden, targets, at::div(targets.positions, seq_len, "floor"), rows);
}

at::Tensor sequence_log_prob_sums(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets,
                                  const at::Tensor& sequence_of_target, int64_t sequences) {
  const int64_t rows = hidden.size(0), seq_len = hidden.size(1);
  const at::Tensor flat = hidden.reshape({rows * seq_len, hidden.size(2)});  // (B*T, C)
  const int64_t count = targets.positions.size(0);
  const int64_t chunk = logit_chunk_rows(model.config().vocab_size);
  std::vector<at::Tensor> pieces;
  for (int64_t begin = 0; begin < count; begin += chunk) {
    const int64_t end = std::min(count, begin + chunk);
    const at::Tensor logits =
        model.lm_head(flat.index_select(0, targets.positions.slice(0, begin, end))).to(at::kFloat);  // (n, V)
    const at::Tensor ids = targets.ids.slice(0, begin, end).unsqueeze(1);                          // (n, 1)
    pieces.push_back(at::log_softmax(logits, -1).gather(1, ids).squeeze(1));
  }
  const at::Tensor token_logps = pieces.empty() ? at::zeros({0}, hidden.options().dtype(at::kFloat)) : at::cat(pieces);
  return at::zeros({sequences}, hidden.options().dtype(at::kFloat)).index_add(0, sequence_of_target, token_logps);
}

at::Tensor row_target_counts(const TokenTargets& targets, int64_t rows, int64_t seq_len) {
  return sequence_target_counts(at::div(targets.positions, seq_len, "floor"), rows);
}

at::Tensor sequence_target_counts(const at::Tensor& sequence_of_target, int64_t sequences) {
  const at::Tensor ones = at::ones({sequence_of_target.size(0)}, sequence_of_target.options().dtype(at::kFloat));
  return at::zeros({sequences}, ones.options()).index_add(0, sequence_of_target, ones);
}

TokenTargets every_next_token_targets(const at::Tensor& input_ids, const at::Tensor& position_ids, int64_t rows) {
  const int64_t seq_len = input_ids.size(1);
  const at::Tensor positions = position_ids.slice(0, 0, rows);                              // (rows, T)
  const at::Tensor next_is_real = at::zeros_like(positions, positions.options().dtype(at::kBool));
  next_is_real.slice(1, 0, seq_len - 1).copy_(positions.slice(1, 1) == positions.slice(1, 0, seq_len - 1) + 1);
  const at::Tensor flat_positions = next_is_real.reshape(-1).nonzero().squeeze(1);  // (N) into (rows*T)
  const at::Tensor next_ids = input_ids.slice(0, 0, rows).reshape(-1).index_select(0, flat_positions + 1);
  return {flat_positions, next_ids, at::Tensor()};
}

}  // namespace finetune
