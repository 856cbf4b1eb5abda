#include "finetune/train/loss.h"

#include "finetune/data/sample.h"

namespace finetune {
namespace {
constexpr int64_t kTokensPerChunk = 8192;
}

at::Tensor shift_labels(const at::Tensor& labels) {
  auto padded = at::constant_pad_nd(labels, {0, 1}, kIgnoreIndex);
  return padded.narrow(1, 1, labels.size(1));
}

at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const at::Tensor& labels) {
  auto targets = shift_labels(labels).reshape(-1);                       // (B*T)
  auto positions = targets.ne(kIgnoreIndex).nonzero().squeeze(1);        // (N)
  return causal_lm_loss_sum(model, hidden, positions, targets.index_select(0, positions));
}

at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const at::Tensor& target_positions,
                              const at::Tensor& target_ids) {
  auto flat_hidden = hidden.reshape({-1, hidden.size(-1)});              // (B*T, C)
  auto total = at::zeros({}, hidden.options().dtype(at::kFloat));
  const int64_t count = target_positions.size(0);
  for (int64_t start = 0; start < count; start += kTokensPerChunk) {
    const int64_t n = std::min(kTokensPerChunk, count - start);
    auto logits = model.lm_head(flat_hidden.index_select(0, target_positions.narrow(0, start, n))).to(at::kFloat);
    total = total + at::cross_entropy_loss(logits, target_ids.narrow(0, start, n), std::nullopt, at::Reduction::Sum,
                                           kIgnoreIndex);  // (n, V) -> scalar
  }
  return total;
}

}  // namespace finetune
