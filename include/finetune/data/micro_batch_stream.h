// The rank's stream of optimizer steps, each a list of micro-batches (gradient accumulation),
// epoch after epoch.
// Without packing a micro-batch is batch_size samples (DistributedSampler semantics). With
// packing the whole epoch order (shared by all ranks) is packed into rows of at most
// max_seq_length tokens, the rows are dealt to ranks by the sampler's rule (Note [One rule for
// ranks] in rank_assignment.h: round-robin, padded by wrapping to a multiple of the world size), and a micro-batch is batch_size rows: every rank
// gets the same number of nearly full rows, so ranks stay balanced in tokens. An optimizer step never spans two epochs: the last step of an epoch takes
// the micro-batches that are left (as HF's Trainer does). Every rank has the same number of
// micro-batches per epoch (the sampler pads), so ranks always agree on the step structure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "finetune/data/batch.h"
#include "finetune/data/sample.h"
#include "finetune/data/sampler.h"

namespace finetune {

struct MicroBatchStreamConfig {
  SamplerConfig sampler;
  int64_t batch_size = 1;
  int64_t gradient_accumulation_steps = 1;
  bool group_by_length = false;
  bool packing = false;
  int64_t max_seq_length = 2048;  // row capacity when packing
  int64_t pad_token_id = 0;
};

class MicroBatchStream {
 public:
  MicroBatchStream(const std::vector<Sample>& samples, MicroBatchStreamConfig config);

  int64_t micro_batches_per_epoch() const { return micro_batches_per_epoch_; }
  int64_t steps_per_epoch() const;

  // The next optimizer step's micro-batches (1..gradient_accumulation_steps of them).
  std::vector<HostBatch> next_step();

  // Where the next step starts: the epoch, and the optimizer steps already taken in it.
  int64_t epoch() const { return epoch_; }
  int64_t steps_into_epoch() const;
  // Continues from a position (resume): the next step is the one after `steps_into_epoch` steps
  // of `epoch`. Past the epoch's end, the next step starts the following epoch.
  void seek(int64_t epoch, int64_t steps_into_epoch);

 private:
  void start_epoch(int64_t epoch);
  std::vector<std::vector<std::vector<int64_t>>> packed_micro_batches(int64_t epoch) const;

  const std::vector<Sample>& samples_;
  MicroBatchStreamConfig config_;
  std::vector<int64_t> lengths_;
  std::vector<std::vector<std::vector<int64_t>>> epoch_batches_;  // micro-batch -> rows -> samples
  int64_t micro_batches_per_epoch_ = 0;
  int64_t epoch_ = 0;
  size_t cursor_ = 0;
};

}  // namespace finetune
