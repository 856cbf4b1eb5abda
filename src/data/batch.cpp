// Collating samples into a right-padded host batch (one sample per row).
#include "finetune/data/batch.h"

#include <algorithm>
#include <string>

#include "finetune/util/errors.h"

namespace finetune {

HostBatch collate(const std::vector<Sample>& samples, const std::vector<int64_t>& indices,
                  int64_t pad_token_id, int64_t pad_to_multiple_of) {
  if (indices.empty()) throw Error("collate: a batch needs at least one sample");
  if (pad_to_multiple_of < 1) {
    throw Error("collate: pad_to_multiple_of must be >= 1, got " + std::to_string(pad_to_multiple_of));
  }
  int64_t longest = 0;
  for (int64_t index : indices) {
    if (index < 0 || index >= static_cast<int64_t>(samples.size())) {
      throw Error("collate: sample index " + std::to_string(index) + " out of range [0, " +
                  std::to_string(samples.size()) + ")");
    }
    const Sample& sample = samples[index];
    if (sample.input_ids.size() != sample.labels.size()) {
      throw Error("collate: sample " + std::to_string(index) + " has " + std::to_string(sample.input_ids.size()) +
                  " input ids but " + std::to_string(sample.labels.size()) + " labels");
    }
    if (sample.input_ids.empty()) throw Error("collate: sample " + std::to_string(index) + " is empty");
    longest = std::max<int64_t>(longest, sample.input_ids.size());
  }

  HostBatch batch;
  batch.rows = static_cast<int64_t>(indices.size());
  batch.seq_len = (longest + pad_to_multiple_of - 1) / pad_to_multiple_of * pad_to_multiple_of;
  const size_t cells = static_cast<size_t>(batch.rows * batch.seq_len);
  batch.input_ids.assign(cells, pad_token_id);
  batch.labels.assign(cells, kIgnoreIndex);
  batch.position_ids.assign(cells, 0);
  batch.attention_mask.assign(cells, 0);
  batch.sample_lengths.reserve(indices.size());

  for (int64_t row = 0; row < batch.rows; ++row) {
    const Sample& sample = samples[indices[row]];
    const int64_t length = static_cast<int64_t>(sample.input_ids.size());
    const size_t base = static_cast<size_t>(row * batch.seq_len);
    for (int64_t t = 0; t < length; ++t) {
      batch.input_ids[base + t] = sample.input_ids[t];
      batch.labels[base + t] = sample.labels[t];
      batch.position_ids[base + t] = t;
      batch.attention_mask[base + t] = 1;
    }
    batch.sample_lengths.push_back({length});
    batch.real_tokens += length;
    batch.trainable_tokens += trainable_token_count(sample);
  }
  return batch;
}

}  // namespace finetune
