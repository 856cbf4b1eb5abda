#include "finetune/data/micro_batch_stream.h"

#include <algorithm>

#include "finetune/data/rank_assignment.h"
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

std::vector<std::vector<std::vector<int64_t>>> MicroBatchStream::packed_micro_batches(int64_t epoch) const {
  SamplerConfig whole = config_.sampler;  // the epoch order every rank agrees on
  whole.world_size = 1;
  whole.rank = 0;
  whole.drop_last = false;
  auto rows = pack_samples(rank_indices(whole, epoch), lengths_, config_.max_seq_length);
  // Best-fit decreasing creates rows longest-first; visiting them in that order would feed every
  // epoch its longest samples first. With shuffling the rows go in the epoch's own random order.
  if (config_.sampler.shuffle) {
    const auto order = epoch_permutation(static_cast<int64_t>(rows.size()), config_.sampler.seed, epoch);
    std::vector<std::vector<int64_t>> shuffled;
    shuffled.reserve(rows.size());
    for (int64_t index : order) shuffled.push_back(std::move(rows[static_cast<size_t>(index)]));
    rows = std::move(shuffled);
  }
  // Note [One rule for ranks]: the rows are dealt like the sampler deals samples.
  rows = rank_share(rows, config_.sampler.world_size, config_.sampler.rank,
                    config_.sampler.drop_last ? RankPadding::drop_remainder : RankPadding::wrap_around);
  std::vector<std::vector<std::vector<int64_t>>> batches;
  for (auto& row : rows) {
    if (batches.empty() || static_cast<int64_t>(batches.back().size()) == config_.batch_size) batches.emplace_back();
    batches.back().push_back(std::move(row));
  }
  if (config_.sampler.drop_last && !batches.empty() && static_cast<int64_t>(batches.back().size()) < config_.batch_size) {
    batches.pop_back();
  }
  return batches;
}

void MicroBatchStream::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  if (config_.packing) {
    epoch_batches_ = packed_micro_batches(epoch);
    return;
  }
  const auto indices = rank_indices(config_.sampler, epoch);
  epoch_batches_.clear();
  for (const auto& batch : micro_batches(indices, config_.batch_size, config_.group_by_length, lengths_,
                                         config_.sampler.drop_last)) {
    std::vector<std::vector<int64_t>> rows;
    for (int64_t index : batch) rows.push_back({index});
    epoch_batches_.push_back(std::move(rows));
  }
}

int64_t MicroBatchStream::steps_into_epoch() const {
  const auto accumulation = static_cast<size_t>(config_.gradient_accumulation_steps);
  return static_cast<int64_t>((cursor_ + accumulation - 1) / accumulation);
}

void MicroBatchStream::seek(int64_t epoch, int64_t steps_into_epoch) {
  if (epoch < 0 || steps_into_epoch < 0) throw Error("data position: negative epoch or step");
  start_epoch(epoch);
  const auto wanted = static_cast<uint64_t>(steps_into_epoch) * static_cast<uint64_t>(config_.gradient_accumulation_steps);
  cursor_ = static_cast<size_t>(std::min<uint64_t>(wanted, epoch_batches_.size()));
}

std::vector<HostBatch> MicroBatchStream::next_step() {
  if (cursor_ >= epoch_batches_.size()) start_epoch(epoch_ + 1);
  std::vector<HostBatch> step;
  for (int64_t i = 0; i < config_.gradient_accumulation_steps && cursor_ < epoch_batches_.size(); ++i) {
    step.push_back(collate_rows(samples_, epoch_batches_[cursor_++], config_.pad_token_id));
  }
  return step;
}

}  // namespace finetune
