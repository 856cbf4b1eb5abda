#include "finetune/data/batch.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <string>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

const Sample& checked_sample(const std::vector<Sample>& samples, int64_t index) {
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
  return sample;
}

int64_t count_trainable(const std::vector<int64_t>& labels, int64_t rows, int64_t seq_len) {
  int64_t count = 0;
  for (int64_t row = 0; row < rows; ++row) count += count_targets(labels.data() + row * seq_len, seq_len);
  return count;
}

}  // namespace

HostBatch collate_rows(const std::vector<Sample>& samples, const std::vector<std::vector<int64_t>>& rows,
                       int64_t pad_token_id) {
  if (rows.empty()) throw Error("collate: a batch needs at least one sample");
  int64_t longest = 0;
  for (const auto& row : rows) {
    if (row.empty()) throw Error("collate: a batch row needs at least one sample");
    int64_t length = 0;
    for (int64_t index : row) length += static_cast<int64_t>(checked_sample(samples, index).input_ids.size());
    longest = std::max(longest, length);
  }

  HostBatch batch;
  batch.rows = static_cast<int64_t>(rows.size());
  batch.seq_len = longest;
  const size_t cells = static_cast<size_t>(batch.rows * batch.seq_len);
  batch.input_ids.assign(cells, pad_token_id);
  batch.labels.assign(cells, kIgnoreIndex);
  batch.position_ids.assign(cells, 0);
  batch.sample_lengths.resize(rows.size());

  for (int64_t row = 0; row < batch.rows; ++row) {
    size_t cell = static_cast<size_t>(row * batch.seq_len);
    for (size_t k = 0; k < rows[row].size(); ++k) {
      const Sample& sample = samples[rows[row][k]];
      const int64_t length = static_cast<int64_t>(sample.input_ids.size());
      for (int64_t t = 0; t < length; ++t, ++cell) {
        batch.input_ids[cell] = sample.input_ids[t];
        batch.labels[cell] = (t == 0 && k > 0) ? kIgnoreIndex : sample.labels[t];
        batch.position_ids[cell] = t;
      }
      batch.sample_lengths[row].push_back(length);
      batch.real_tokens += length;
    }
  }
  batch.trainable_tokens = count_trainable(batch.labels, batch.rows, batch.seq_len);
  return batch;
}

HostBatch collate(const std::vector<Sample>& samples, const std::vector<int64_t>& indices, int64_t pad_token_id) {
  std::vector<std::vector<int64_t>> rows;
  rows.reserve(indices.size());
  for (int64_t index : indices) rows.push_back({index});
  return collate_rows(samples, rows, pad_token_id);
}

HostBatch flatten(const HostBatch& batch) {
  HostBatch flat;
  flat.rows = 1;
  flat.seq_len = batch.real_tokens;
  flat.real_tokens = batch.real_tokens;
  flat.sample_lengths.resize(1);
  for (int64_t row = 0; row < batch.rows; ++row) {
    int64_t start = 0;
    for (int64_t length : batch.sample_lengths[row]) {
      const size_t base = static_cast<size_t>(row * batch.seq_len + start);
      for (int64_t t = 0; t < length; ++t) {
        flat.input_ids.push_back(batch.input_ids[base + t]);
        // A sample's first position is never a target once samples are adjacent (see collate_rows).
        flat.labels.push_back(t == 0 ? kIgnoreIndex : batch.labels[base + t]);
        flat.position_ids.push_back(batch.position_ids[base + t]);
      }
      flat.sample_lengths[0].push_back(length);
      start += length;
    }
  }
  flat.trainable_tokens = count_trainable(flat.labels, 1, flat.seq_len);
  return flat;
}

std::vector<std::vector<int64_t>> pack_samples(const std::vector<int64_t>& order, const std::vector<int64_t>& lengths,
                                               int64_t capacity) {
  std::vector<int64_t> by_length(order);
  std::stable_sort(by_length.begin(), by_length.end(), [&](int64_t a, int64_t b) {
    return lengths.at(static_cast<size_t>(a)) > lengths.at(static_cast<size_t>(b));
  });
  std::vector<std::vector<int64_t>> rows;
  std::set<std::pair<int64_t, size_t>> free_space;  // (tokens left, row): the best fit is the first >= length
  for (int64_t index : by_length) {
    const int64_t length = lengths.at(static_cast<size_t>(index));
    if (length > capacity) {
      throw Error("pack_samples: sample " + std::to_string(index) + " has " + std::to_string(length) +
                  " tokens, more than a row holds (" + std::to_string(capacity) + ")");
    }
    auto fit = free_space.lower_bound({length, 0});
    size_t row;
    int64_t left;
    if (fit == free_space.end()) {
      row = rows.size();
      rows.emplace_back();
      left = capacity;
    } else {
      std::tie(left, row) = *fit;
      free_space.erase(fit);
    }
    rows[row].push_back(index);
    if (left - length > 0) free_space.insert({left - length, row});
  }
  return rows;
}

}  // namespace finetune
