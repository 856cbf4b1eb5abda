#include "finetune/train/graph_batch.h"

#include <algorithm>
#include <numeric>

#include "finetune/train/micro_step_graph_limits.h"
#include "finetune/util/errors.h"

namespace finetune {

int64_t graph_bucket(int64_t count) {
  if (count < 1) count = 1;
  int64_t power = 1;
  while (power * 2 <= count) power *= 2;
  const int64_t step = std::max<int64_t>(64, power / 8);
  return (count + step - 1) / step * step;
}

namespace {

// The smallest power of two >= count, at least `floor` (itself a power of two).
int64_t power_of_two_at_least(int64_t count, int64_t floor) {
  int64_t bucket = floor;
  while (bucket < count) bucket *= 2;
  return bucket;
}

}  // namespace

int64_t graph_sample_bucket(int64_t count) { return power_of_two_at_least(count, 8); }

int64_t graph_longest_bucket(int64_t length, int64_t tokens) {
  return std::min(power_of_two_at_least(length, 64), tokens);
}

int64_t graph_pair_bucket(int64_t pairs) { return power_of_two_at_least(pairs, 1); }

namespace {

// The samples' lengths in flatten() order.
std::vector<int64_t> lengths_in_order(const HostBatch& batch) {
  std::vector<int64_t> lengths;
  for (const auto& row : batch.sample_lengths) lengths.insert(lengths.end(), row.begin(), row.end());
  return lengths;
}

// Positions of the first half of the samples (the chosen ones) whose next token is in the same
// sample: every_next_token_targets' rows (train/sequence_log_probs.h).
int64_t chosen_next_token_count(const std::vector<int64_t>& lengths) {
  int64_t count = 0;
  for (size_t s = 0; s < lengths.size() / 2; ++s) count += std::max<int64_t>(lengths[s] - 1, 0);
  return count;
}

[[noreturn]] void throw_not_pairs(const HostBatch& flat) {
  throw Error("graph_batch: a preference micro-batch must hold B chosen then B rejected samples with the B pairs' "
              "group ids, got " + std::to_string(flat.sample_lengths[0].size()) + " samples and " +
              std::to_string(flat.group_ids.size()) + " group ids");
}

// PairSlots' section: each target's sequence (0 .. 2P-1 as pair_objective.h numbers them; 2P for
// the weight-0 rows), the pairs' group ids (0 for filler pairs), which slots are real, B.
void append_pair_slots(const HostBatch& flat, const std::vector<int64_t>& positions, const GraphShape& shape,
                       std::vector<int64_t>& v) {
  const std::vector<int64_t>& lengths = flat.sample_lengths[0];
  const auto pairs = static_cast<int64_t>(lengths.size() / 2);
  if (lengths.size() % 2 != 0 || static_cast<int64_t>(flat.group_ids.size()) != pairs) throw_not_pairs(flat);
  std::vector<int64_t> ends(lengths.size());
  std::partial_sum(lengths.begin(), lengths.end(), ends.begin());
  for (int64_t position : positions) {
    const auto sample = static_cast<int64_t>(std::upper_bound(ends.begin(), ends.end(), position) - ends.begin());
    v.push_back(sample < pairs ? sample : shape.pairs + sample - pairs);
  }
  v.insert(v.end(), static_cast<size_t>(shape.targets) - positions.size(), 2 * shape.pairs);
  v.insert(v.end(), flat.group_ids.begin(), flat.group_ids.end());
  v.insert(v.end(), static_cast<size_t>(shape.pairs - pairs), 0);
  v.insert(v.end(), static_cast<size_t>(pairs), 1);
  v.insert(v.end(), static_cast<size_t>(shape.pairs - pairs), 0);
  v.push_back(pairs);
}

// PairSlots::chosen_next_tokens' section: in each chosen sample every position but the last, with
// the next token as its target; filler rows read the filler's last position.
void append_chosen_next_tokens(const HostBatch& flat, const GraphShape& shape, std::vector<int64_t>& v) {
  const std::vector<int64_t>& lengths = flat.sample_lengths[0];
  std::vector<int64_t> positions;
  int64_t start = 0;
  for (size_t s = 0; s < lengths.size() / 2; ++s) {
    for (int64_t t = start; t + 1 < start + lengths[s]; ++t) positions.push_back(t);
    start += lengths[s];
  }
  const auto real = static_cast<int64_t>(positions.size());
  const int64_t filler = shape.chosen_next_tokens - real;
  v.insert(v.end(), positions.begin(), positions.end());
  v.insert(v.end(), static_cast<size_t>(filler), shape.tokens - 1);
  for (int64_t position : positions) v.push_back(flat.input_ids[static_cast<size_t>(position + 1)]);
  v.insert(v.end(), static_cast<size_t>(filler), 0);
  v.insert(v.end(), static_cast<size_t>(real), 0);
  v.insert(v.end(), static_cast<size_t>(filler), 1);
  v.push_back(real);
}

}  // namespace

GraphShape graph_shape(const HostBatch& batch, GraphSections sections) {
  const std::vector<int64_t> lengths = lengths_in_order(batch);
  // The batch's own extents alone: Note [Each rank its own shape].
  const auto samples = static_cast<int64_t>(lengths.size());
  GraphShape shape{graph_bucket(batch.real_tokens), graph_bucket(batch.trainable_tokens), graph_sample_bucket(samples + 1)};
  // Attention's bound (GraphShape::longest): the longest sample or the filler, which is as long as
  // the bucket's tokens beyond the batch's own.
  const int64_t longest_sample = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  const int64_t bound = graph_longest_bucket(std::max(longest_sample, shape.tokens - batch.real_tokens), shape.tokens);
  shape.longest = shape.tokens > kCudaGraphMaxTokens || 4 * bound <= shape.tokens ? bound : shape.tokens;
  if (sections.pairs) shape.pairs = graph_pair_bucket((samples + 1) / 2);
  if (sections.chosen_next_tokens) shape.chosen_next_tokens = graph_bucket(chosen_next_token_count(lengths));
  return shape;
}

GraphBatch graph_batch(const HostBatch& flat, int64_t filler_token_id, GraphSections sections) {
  if (flat.rows != 1 || flat.sample_lengths.size() != 1) {
    throw Error("graph_batch: expects a flattened batch (one row), got " + std::to_string(flat.rows) + " rows");
  }
  const int64_t real = flat.seq_len;
  std::vector<int64_t> positions, targets;
  for_each_target(flat.labels.data(), real, [&](int64_t position, int64_t target) {
    positions.push_back(position);
    targets.push_back(target);
  });
  GraphBatch out;
  out.shape = graph_shape(flat, sections);
  if (out.shape.targets < static_cast<int64_t>(positions.size())) {
    throw Error("graph_batch: the batch counts " + std::to_string(flat.trainable_tokens) + " trained positions, its labels " +
                std::to_string(positions.size()));
  }
  out.trainable_tokens = flat.trainable_tokens;
  out.real_tokens = flat.real_tokens;
  const int64_t filler = out.shape.tokens - real;
  // graph_shape bounds the same samples; the filler it bounds is the batch's real_tokens short of
  // the bucket, which must be the flattened row's length.
  if (filler > out.shape.longest) {
    throw Error("graph_batch: the filler of " + std::to_string(filler) + " tokens is longer than the shape's bound of " +
                std::to_string(out.shape.longest));
  }
  const int64_t padding_targets = out.shape.targets - static_cast<int64_t>(positions.size());

  auto& v = out.values;
  v.reserve(static_cast<size_t>(2 * out.shape.tokens + 3 * out.shape.targets + out.shape.samples + 2));
  v.insert(v.end(), flat.input_ids.begin(), flat.input_ids.end());
  v.insert(v.end(), static_cast<size_t>(filler), filler_token_id);
  v.insert(v.end(), flat.position_ids.begin(), flat.position_ids.end());
  for (int64_t t = 0; t < filler; ++t) v.push_back(t);
  // Weight-0 rows read the row's last position (any position would do: their weight is 0).
  v.insert(v.end(), positions.begin(), positions.end());
  v.insert(v.end(), static_cast<size_t>(padding_targets), out.shape.tokens - 1);
  v.insert(v.end(), targets.begin(), targets.end());
  v.insert(v.end(), static_cast<size_t>(padding_targets), 0);
  v.insert(v.end(), positions.size(), 1);
  v.insert(v.end(), static_cast<size_t>(padding_targets), 0);
  v.push_back(0);
  for (int64_t length : flat.sample_lengths[0]) v.push_back(v.back() + length);
  // The filler (empty when the row fills the bucket) ends at the bucket's last token; the empty
  // samples after it pad cu_seqlens.
  const auto real_samples = static_cast<int64_t>(flat.sample_lengths[0].size());
  v.insert(v.end(), static_cast<size_t>(out.shape.samples - real_samples), out.shape.tokens);
  v.push_back(real);
  if (sections.pairs) append_pair_slots(flat, positions, out.shape, v);
  if (sections.chosen_next_tokens) append_chosen_next_tokens(flat, out.shape, v);
  return out;
}

GraphInputs graph_inputs(const at::Tensor& buffer, const GraphShape& shape) {
  int64_t offset = 0;
  auto take = [&](int64_t count) {
    auto part = buffer.narrow(0, offset, count);
    offset += count;
    return part;
  };
  GraphInputs in;
  in.input_ids = take(shape.tokens).view({1, shape.tokens});
  in.position_ids = take(shape.tokens).view({1, shape.tokens});
  in.target_positions = take(shape.targets);
  in.target_ids = take(shape.targets);
  in.target_weights = take(shape.targets).to(at::kFloat);
  in.cu_seqlens = take(shape.samples + 1).to(at::kInt);
  in.real_tokens = take(1).squeeze(0);
  if (shape.pairs > 0) {
    PairSlots& pairs = in.pairs;
    pairs.slots = shape.pairs;
    pairs.sequence_of_target = take(shape.targets);
    pairs.group_ids = take(shape.pairs);
    pairs.real = take(shape.pairs).to(at::kBool);
    pairs.count = take(1).to(at::kFloat).squeeze(0);
  }
  if (shape.chosen_next_tokens > 0) {
    PairSlots& pairs = in.pairs;
    pairs.chosen_next_tokens.positions = take(shape.chosen_next_tokens);
    pairs.chosen_next_tokens.ids = take(shape.chosen_next_tokens);
    pairs.chosen_next_token_filler = take(shape.chosen_next_tokens);
    pairs.chosen_next_token_count = take(1).to(at::kFloat).squeeze(0);
  }
  return in;
}

at::Tensor filler_free_token_mask(const at::Tensor& real_tokens, int64_t tokens) {
  return at::arange(tokens, real_tokens.options()).lt(real_tokens).to(at::kFloat);
}

MicroBatchInputs graph_micro_batch(const GraphInputs& in, const GraphShape& shape) {
  MicroBatchInputs batch;
  batch.input_ids = in.input_ids;
  batch.position_ids = in.position_ids;
  batch.mask.is_causal_only = false;
  batch.mask.cu_seqlens = in.cu_seqlens;
  batch.mask.max_seqlen = shape.longest;  // bounds every sample's length and the filler's
  batch.targets = {in.target_positions, in.target_ids, in.target_weights};
  batch.token_mask = filler_free_token_mask(in.real_tokens, shape.tokens);
  batch.pairs = in.pairs;
  return batch;
}

}  // namespace finetune
