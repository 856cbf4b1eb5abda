// The micro-batches the graphed micro-step tests train on: one or two samples each, a third of
// every sample's labels ignored, padded shapes that repeat (so graphs are replayed) and differ (so
// several are captured). {64} and {128} fill their token buckets exactly: they replay the graphs
// that {40} and {100} captured with a filler sample, with an empty one.
#pragma once

#include <cstdint>
#include <vector>

#include "finetune/data/batch.h"

namespace finetune::testing {

inline std::vector<HostBatch> graph_test_micro_batches() {
  std::vector<HostBatch> out;
  const std::vector<std::vector<int64_t>> lengths = {{40}, {100}, {30, 20}, {64}, {128}, {60}, {33, 17}, {90}};
  int32_t next = 7;
  for (const auto& batch_lengths : lengths) {
    std::vector<Sample> samples;
    std::vector<int64_t> indices;
    for (int64_t length : batch_lengths) {
      Sample sample;
      for (int64_t t = 0; t < length; ++t) {
        sample.input_ids.push_back(next = (next * 37 + 11) % 500 + 3);
        sample.labels.push_back(t < length / 3 ? kIgnoreIndex : sample.input_ids.back());
      }
      indices.push_back(static_cast<int64_t>(samples.size()));
      samples.push_back(sample);
    }
    out.push_back(collate(samples, indices, 0));
  }
  return out;
}

}  // namespace finetune::testing
