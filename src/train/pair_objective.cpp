// The preference objectives' shared part (see pair_objective.h).
#include "finetune/train/pair_objective.h"

#include <numeric>

#include "finetune/train/sequence_log_probs.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

[[noreturn]] void throw_not_pairs(const std::string& objective, int64_t sequences) {
  throw Error(objective + " micro-batch must hold the chosen rows then the rejected rows of its pairs, got " +
              std::to_string(sequences) + " sequences");
}

// Where the samples of one padding-free row start: from the variable-length mask's host lengths,
// else (the masked flat layout, tests only) where its position ids restart, read back.
std::vector<int64_t> flat_sample_starts(const MicroBatchInputs& batch) {
  if (batch.mask.variable_length()) {
    const auto& lengths = batch.mask.sample_lengths;
    std::vector<int64_t> starts(lengths.size());
    std::exclusive_scan(lengths.begin(), lengths.end(), starts.begin(), int64_t{0});
    return starts;
  }
  const at::Tensor restarts = (batch.position_ids[0] == 0).nonzero().squeeze(1).cpu().contiguous();
  return std::vector<int64_t>(restarts.data_ptr<int64_t>(), restarts.data_ptr<int64_t>() + restarts.numel());
}

// One padding-free row of 2B samples.
PairSequences flat_pair_sequences(const MicroBatchInputs& batch, const std::string& objective) {
  const std::vector<int64_t> starts = flat_sample_starts(batch);
  const auto samples = static_cast<int64_t>(starts.size());
  if (samples == 0 || samples % 2 != 0) throw_not_pairs(objective, samples);
  PairSequences out;
  out.pairs = samples / 2;
  const at::Tensor boundaries = at::tensor(starts, at::TensorOptions().dtype(at::kLong)).to(batch.input_ids.device());
  out.sequence_of_target = at::bucketize(batch.targets.positions, boundaries, /*out_int32=*/false, /*right=*/true) - 1;
  out.chosen_rows = 1;
  out.chosen_columns = starts[static_cast<size_t>(out.pairs)];
  return out;
}

// A graph's pair slots (Note [Filler pairs]).
PairSequences slot_pair_sequences(const PairSlots& slots) {
  PairSequences out;
  out.pairs = slots.slots;
  out.sequence_of_target = slots.sequence_of_target;
  out.real = {slots.real, slots.count};
  return out;
}

}  // namespace

PairSequences pair_sequences(const MicroBatchInputs& batch, const std::string& objective) {
  if (batch.pairs.slots > 0) return slot_pair_sequences(batch.pairs);
  const int64_t rows = batch.input_ids.size(0), seq_len = batch.input_ids.size(1);
  if (rows == 1) return flat_pair_sequences(batch, objective);
  if (rows == 0 || rows % 2 != 0) throw_not_pairs(objective, rows);
  PairSequences out;
  out.pairs = rows / 2;
  out.sequence_of_target = at::div(batch.targets.positions, seq_len, "floor");
  out.chosen_rows = out.pairs;
  out.chosen_columns = seq_len;
  return out;
}

PairValues split_pairs(const at::Tensor& sequences) {
  const auto halves = sequences.chunk(2, 0);
  return {halves[0], halves[1]};
}

PairValues pair_log_prob_sums(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets,
                              const PairSequences& sequences) {
  const int64_t count = 2 * sequences.pairs;
  if (sequences.real.all()) {
    return split_pairs(sequence_log_prob_sums(model, hidden, targets, sequences.sequence_of_target, count));
  }
  // One more sequence collects the filler sample's weight-0 positions, then is dropped.
  const at::Tensor sums = sequence_log_prob_sums(model, hidden, targets, sequences.sequence_of_target, count + 1);
  return split_pairs(sums.slice(0, 0, count));
}

PairValues pair_target_counts(const PairSequences& sequences) {
  const int64_t count = 2 * sequences.pairs;
  if (sequences.real.all()) return split_pairs(sequence_target_counts(sequences.sequence_of_target, count));
  const at::Tensor counts = sequence_target_counts(sequences.sequence_of_target, count + 1).slice(0, 0, count);
  return with_filler_value(split_pairs(counts), sequences.real, 1.0);
}

PairValues with_filler_value(const PairValues& values, const RealPairs& real, double filler) {
  if (real.all()) return values;
  return {at::where(real.mask, values.chosen, filler), at::where(real.mask, values.rejected, filler)};
}

double PairObjective::normaliser_share(const HostBatch& batch) const {
  // The stream collates pairs as padded rows (the trainer flattens them afterwards).
  return static_cast<double>(batch.rows / 2);
}

at::Tensor PairObjective::loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                                   const ForwardOptions& forward) const {
  return loss_and_metric_sums(model, batch, forward).loss_sum;
}

LossAndMetrics PairObjective::loss_and_metric_sums(const CausalLM& model, const MicroBatchInputs& batch,
                                                   const ForwardOptions& forward) const {
  const PreferenceLoss loss = evaluate(model, batch, forward);
  const RealPairs& real = loss.real;
  // evaluate() checked the pairs; TRL's first metric (rewards/chosen) has one value per pair slot.
  const auto weight = static_cast<double>(loss.metrics.empty() ? 0 : loss.metrics.front().second.numel());
  // A micro-batch quantity counts once per (real) pair; a per-pair metric sums over the real pairs.
  auto times_pairs = [&](const at::Tensor& value) { return real.all() ? value * weight : value * real.count; };
  auto pair_sum = [&](const at::Tensor& values) {
    return real.all() ? values.sum() : at::where(real.mask, values, 0).sum();
  };
  std::vector<at::Tensor> sums;
  for (const std::string& metric : metric_names_) {
    const at::Tensor* values = nullptr;
    for (const auto& [metric_name, tensor] : loss.metrics) {
      if (metric_name == metric) values = &tensor;
    }
    if (values == nullptr) throw Error(name() + " objective: its loss has no metric \"" + metric + "\"");
    const at::Tensor as_double = values->detach().to(at::kDouble);
    sums.push_back(as_double.dim() == 0 ? times_pairs(as_double) : pair_sum(as_double));
  }
  return {times_pairs(loss.loss), sums.empty() ? at::Tensor() : at::stack(sums)};
}

}  // namespace finetune
