// DPO's micro-batch loss on the objective seam (see dpo_objective.h).
#include "finetune/train/dpo_objective.h"

#include <algorithm>
#include <utility>

#include <ATen/core/grad_mode.h>

#include "finetune/data/batch.h"
#include "finetune/util/errors.h"

namespace finetune {

const std::vector<std::string>& dpo_metric_names() {
  static const std::vector<std::string> names = {"rewards/chosen", "rewards/rejected", "rewards/accuracies",
                                                 "rewards/margins", "logps/chosen",    "logps/rejected"};
  return names;
}

DpoObjective::DpoObjective(DpoLossConfig config, CausalLM& model, ReferenceAdapters& reference)
    : PairObjective(dpo_metric_names()), config_(config), model_(model), reference_(reference) {}

DpoObjective::DpoObjective(DpoLossConfig config, CausalLM& model)
    : PairObjective(dpo_metric_names()),
      config_(config),
      model_(model),
      base_model_(std::make_unique<ReferenceAdapters>()),
      reference_(*base_model_) {}

bool DpoObjective::graph_capturable() const { return reference_.cuda_graph_safe(); }

std::vector<const LinearAdapter*> DpoObjective::swapped_in_adapters() const { return reference_.adapters(); }

PairValues DpoObjective::reference_log_probs(const MicroBatchInputs& batch, const PairSequences& sequences) const {
  if (!reference_precomputed()) return reference_forward(batch, sequences);
  if (batch.pairs.slots > 0) {  // a graph's pair slots: filler pairs read pair 0's values, never counted
    return {precomputed_.chosen.index_select(0, batch.pairs.group_ids),
            precomputed_.rejected.index_select(0, batch.pairs.group_ids)};
  }
  if (static_cast<int64_t>(batch.group_ids.size()) != sequences.pairs) {
    throw Error("DPO: precomputed reference log-probs need the micro-batch's pair indices (HostBatch::group_ids)");
  }
  const at::Tensor pairs = at::tensor(batch.group_ids, at::TensorOptions().dtype(at::kLong)).to(precomputed_.chosen.device());
  return {precomputed_.chosen.index_select(0, pairs), precomputed_.rejected.index_select(0, pairs)};
}

void DpoObjective::precompute_reference(const std::vector<Sample>& pair_rows, int64_t pairs_per_batch,
                                        int64_t pad_token_id, BatchLayout layout) {
  const auto pairs = static_cast<int64_t>(pair_rows.size() / 2);
  std::vector<at::Tensor> chosen, rejected;
  for (int64_t first = 0; first < pairs; first += pairs_per_batch) {
    const int64_t end = std::min(pairs, first + pairs_per_batch);
    std::vector<std::vector<int64_t>> rows;  // chosen rows, then rejected rows (data/micro_batch_stream.h)
    for (int64_t member = 0; member < 2; ++member) {
      for (int64_t pair = first; pair < end; ++pair) rows.push_back({2 * pair + member});
    }
    const DeviceBatch batch = to_device(collate_rows(pair_rows, rows, pad_token_id), model_.device(), layout);
    const MicroBatchInputs inputs = micro_batch_inputs(batch);
    const PairValues values = reference_forward(inputs, pair_sequences(inputs, "DPO"));
    chosen.push_back(values.chosen);
    rejected.push_back(values.rejected);
  }
  precomputed_ = {at::cat(chosen), at::cat(rejected)};
}

PairValues DpoObjective::reference_forward(const MicroBatchInputs& batch, const PairSequences& sequences) const {
  at::NoGradGuard no_grad;
  const ReferenceAdapters::Installed installed(reference_, model_);
  ForwardOptions reference_forward;  // eval: no dropout, nothing kept for a backward pass
  const at::Tensor hidden = model_.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, reference_forward);
  return pair_log_prob_sums(model_, hidden, batch.targets, sequences);
}

PreferenceLoss DpoObjective::evaluate(const CausalLM& model, const MicroBatchInputs& batch,
                                      const ForwardOptions& forward) const {
  if (&model != &model_) throw Error("DpoObjective: the micro-batch's model is not the one it swaps adapters on");
  const PairSequences sequences = pair_sequences(batch, "DPO");
  const at::Tensor hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);  // (R, T, C)
  const PairValues policy = pair_log_prob_sums(model, hidden, batch.targets, sequences);
  const PairValues reference = reference_log_probs(batch, sequences);
  PairValues completion_tokens;
  if (config_.loss_type == DpoLossType::Ipo) completion_tokens = pair_target_counts(sequences);
  return dpo_loss(config_, policy, reference, completion_tokens, sequences.real);
}

}  // namespace finetune
