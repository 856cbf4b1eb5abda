#include "finetune/train/graph_batch.h"

#include <algorithm>

#include "finetune/util/errors.h"

namespace finetune {

int64_t graph_bucket(int64_t count) {
  if (count < 1) count = 1;
  int64_t power = 1;
  while (power * 2 <= count) power *= 2;
  const int64_t step = std::max<int64_t>(64, power / 8);
  return (count + step - 1) / step * step;
}

int64_t graph_sample_bucket(int64_t count) {
  int64_t bucket = 8;
  while (bucket < count) bucket *= 2;
  return bucket;
}

GraphShape graph_shape(const HostBatch& batch) {
  int64_t samples = 0;
  for (const auto& row : batch.sample_lengths) samples += static_cast<int64_t>(row.size());
  // Every rank pads to the largest counterpart of its micro-batch (HostBatch::step_peak_*).
  const int64_t tokens = std::max(batch.real_tokens, batch.step_peak_real_tokens);
  const int64_t targets = std::max(batch.trainable_tokens, batch.step_peak_trainable_tokens);
  samples = std::max(samples, batch.step_peak_samples);
  return {graph_bucket(tokens + 1), graph_bucket(targets), graph_sample_bucket(samples + 1)};
}

GraphBatch graph_batch(const HostBatch& flat, int64_t filler_token_id) {
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
  out.shape = graph_shape(flat);  // at least one filler token: no empty sample
  if (out.shape.targets < static_cast<int64_t>(positions.size())) {
    throw Error("graph_batch: the batch counts " + std::to_string(flat.trainable_tokens) + " trained positions, its labels " +
                std::to_string(positions.size()));
  }
  out.trainable_tokens = flat.trainable_tokens;
  out.real_tokens = flat.real_tokens;
  const int64_t filler = out.shape.tokens - real;
  const int64_t padding_targets = out.shape.targets - static_cast<int64_t>(positions.size());

  auto& v = out.values;
  v.reserve(static_cast<size_t>(2 * out.shape.tokens + 3 * out.shape.targets + out.shape.samples + 1));
  v.insert(v.end(), flat.input_ids.begin(), flat.input_ids.end());
  v.insert(v.end(), static_cast<size_t>(filler), filler_token_id);
  v.insert(v.end(), flat.position_ids.begin(), flat.position_ids.end());
  for (int64_t t = 0; t < filler; ++t) v.push_back(t);
  // Weight-0 rows read the filler's last position (any position would do: their weight is 0).
  v.insert(v.end(), positions.begin(), positions.end());
  v.insert(v.end(), static_cast<size_t>(padding_targets), out.shape.tokens - 1);
  v.insert(v.end(), targets.begin(), targets.end());
  v.insert(v.end(), static_cast<size_t>(padding_targets), 0);
  v.insert(v.end(), positions.size(), 1);
  v.insert(v.end(), static_cast<size_t>(padding_targets), 0);
  v.push_back(0);
  for (int64_t length : flat.sample_lengths[0]) v.push_back(v.back() + length);
  // The filler ends at the bucket's last token; the empty samples after it pad cu_seqlens.
  const auto real_samples = static_cast<int64_t>(flat.sample_lengths[0].size());
  v.insert(v.end(), static_cast<size_t>(out.shape.samples - real_samples), out.shape.tokens);
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
  return in;
}

}  // namespace finetune
