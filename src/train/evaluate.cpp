#include "finetune/train/evaluate.h"

#include <cmath>
#include <limits>

#include "finetune/data/batch.h"
#include "finetune/data/rank_assignment.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/objective.h"

namespace finetune {

double EvalResult::mean_loss() const {
  return tokens > 0 ? loss_sum / static_cast<double>(tokens) : std::numeric_limits<double>::quiet_NaN();
}

double EvalResult::perplexity() const { return std::exp(mean_loss()); }

EvalResult evaluate(const CausalLM& model, const std::vector<Sample>& samples, const std::vector<int64_t>& indices,
                    int64_t batch_size, int64_t pad_token_id, const std::string& dump_logits_path) {
  at::NoGradGuard no_grad;
  EvalResult result;
  std::vector<std::pair<std::string, at::Tensor>> dumped;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(model.device()));
  for (size_t start = 0; start < indices.size(); start += batch_size) {
    const size_t end = std::min(indices.size(), start + static_cast<size_t>(batch_size));
    std::vector<int64_t> batch_indices(indices.begin() + start, indices.begin() + end);
    const auto host = collate(samples, batch_indices, pad_token_id);
    // Dumped logits are read per padded row, so dumping keeps the padded layout.
    const auto batch = to_device(host, model.device(),
                                 dump_logits_path.empty() ? batch_layout_for(model.kernel_policy()) : BatchLayout::kPaddedRows);
    // The token loss, with the router term of a MoE model that adds one (transformers' forward adds
    // it whenever it gets labels: Note [Router load-balancing loss] in train/objective.h).
    const CausalLmLoss loss = causal_lm_forward_loss(model, micro_batch_inputs(batch), ForwardOptions{});
    const auto& hidden = loss.hidden;  // (B, T, C)
    loss_sum += loss.loss_sum.to(at::kDouble);
    result.tokens += host.trainable_tokens;
    if (!dump_logits_path.empty()) {
      for (size_t row = 0; row < batch_indices.size(); ++row) {
        const int64_t length = static_cast<int64_t>(samples[batch_indices[row]].input_ids.size());
        auto logits = model.lm_head(hidden[row].narrow(0, 0, length)).to(at::kFloat).cpu();
        dumped.emplace_back("logits." + std::to_string(batch_indices[row]), logits);
      }
    }
  }
  result.loss_sum = loss_sum.item<double>();
  if (!dump_logits_path.empty()) save_tensors(dump_logits_path, dumped);
  return result;
}

double evaluate_across_ranks(const CausalLM& model, const std::vector<Sample>& samples, Communicator& communicator,
                             int64_t batch_size, int64_t pad_token_id) {
  // Note [One rule for ranks], unpadded: every sample is scored exactly once.
  const std::vector<int64_t> shard = rank_positions(static_cast<int64_t>(samples.size()), communicator.world_size(),
                                                    communicator.rank(), RankPadding::none);
  const auto local = evaluate(model, samples, shard, batch_size, pad_token_id);
  auto sums = at::tensor({local.loss_sum, static_cast<double>(local.tokens)}, at::TensorOptions().dtype(at::kDouble))
                  .to(model.device());
  communicator.all_reduce(sums, "evaluation loss");
  const auto host = sums.cpu();
  return host[0].item<double>() / host[1].item<double>();
}

}  // namespace finetune
