#include "finetune/data/micro_batch_stream.h"

#include "finetune/util/errors.h"

namespace finetune {

MicroBatchStream::MicroBatchStream(const std::vector<Sample>& samples, MicroBatchStreamConfig config)
    : samples_(samples), config_(config) {
  if (samples_.empty()) throw Error("the training set is empty (no row has a trainable token)");
  config_.sampler.num_samples = static_cast<int64_t>(samples_.size());
  lengths_.reserve(samples_.size());
  for (const auto& sample : samples_) lengths_.push_back(static_cast<int64_t>(sample.input_ids.size()));
  start_epoch(0);
  micro_batches_per_epoch_ = static_cast<int64_t>(epoch_batches_.size());
  if (micro_batches_per_epoch_ == 0) {
    throw Error("the training set has fewer rows than one global batch and --dataloader_drop_last is set");
  }
}

int64_t MicroBatchStream::steps_per_epoch() const {
  const int64_t accumulation = config_.gradient_accumulation_steps;
  return (micro_batches_per_epoch_ + accumulation - 1) / accumulation;
}

void MicroBatchStream::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  const auto indices = rank_indices(config_.sampler, epoch);
  epoch_batches_ = micro_batches(indices, config_.batch_size, config_.group_by_length, lengths_,
                                 config_.sampler.drop_last);
}

std::vector<HostBatch> MicroBatchStream::next_step() {
  if (cursor_ >= epoch_batches_.size()) start_epoch(epoch_ + 1);
  std::vector<HostBatch> step;
  for (int64_t i = 0; i < config_.gradient_accumulation_steps && cursor_ < epoch_batches_.size(); ++i) {
    step.push_back(collate(samples_, epoch_batches_[cursor_++], config_.pad_token_id, config_.pad_to_multiple_of));
  }
  return step;
}

}  // namespace finetune
