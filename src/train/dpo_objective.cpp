// DPO's micro-batch loss on the objective seam (see dpo_objective.h).
#include "finetune/train/dpo_objective.h"

#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/grad_mode.h>

#include "finetune/model/linear.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Every projection's adapter moved aside for the guard's lifetime, so the model runs its base
// weights alone (PEFT's disable_adapter); put back, unchanged, when the guard ends.
class AdaptersSetAside {
 public:
  explicit AdaptersSetAside(CausalLM& model) {
    for (auto& [name, linear] : model.named_linears()) {
      if (linear->adapter) set_aside_.emplace_back(linear, std::move(linear->adapter));
    }
  }
  ~AdaptersSetAside() {
    for (auto& [linear, adapter] : set_aside_) linear->adapter = std::move(adapter);
  }
  AdaptersSetAside(const AdaptersSetAside&) = delete;
  AdaptersSetAside& operator=(const AdaptersSetAside&) = delete;

 private:
  std::vector<std::pair<Linear*, std::unique_ptr<LinearAdapter>>> set_aside_;
};

// (2B) per-row values -> the B chosen rows and the B rejected rows.
PairValues split_pairs(const at::Tensor& rows) {
  const auto halves = rows.chunk(2, 0);
  return {halves[0], halves[1]};
}

}  // namespace

DpoObjective::DpoObjective(DpoLossConfig config, CausalLM& model) : config_(config), model_(model) {}

double DpoObjective::normaliser_share(const HostBatch& batch) const {
  return static_cast<double>(batch.rows / 2);
}

at::Tensor DpoObjective::loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                                  const ForwardOptions& forward) const {
  const int64_t pairs = batch.input_ids.size(0) / 2;
  return evaluate(model, batch, forward).loss * static_cast<double>(pairs);
}

PreferenceLoss DpoObjective::evaluate(const CausalLM& model, const MicroBatchInputs& batch,
                                      const ForwardOptions& forward) const {
  if (&model != &model_) throw Error("DpoObjective: the micro-batch's model is not the one it sets adapters aside on");
  const int64_t rows = batch.input_ids.size(0), seq_len = batch.input_ids.size(1);
  if (rows == 0 || rows % 2 != 0) {
    throw Error("DPO micro-batch must hold the chosen rows then the rejected rows of its pairs, got " +
                std::to_string(rows) + " rows");
  }
  const at::Tensor hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);  // (2B, T, C)
  const PairValues policy = split_pairs(row_log_prob_sums(model, hidden, batch.targets));
  PairValues reference;
  {
    at::NoGradGuard no_grad;
    const AdaptersSetAside base_only(model_);
    ForwardOptions reference_forward;  // eval: no dropout, nothing kept for a backward pass
    const at::Tensor reference_hidden =
        model_.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, reference_forward);
    reference = split_pairs(row_log_prob_sums(model_, reference_hidden, batch.targets));
  }
  PairValues completion_tokens;
  if (config_.loss_type == DpoLossType::Ipo) completion_tokens = split_pairs(row_target_counts(batch.targets, rows, seq_len));
  return dpo_loss(config_, policy, reference, completion_tokens);
}

}  // namespace finetune
