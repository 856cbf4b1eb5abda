// The rank's stream of optimizer steps (see micro_batch_stream.h).
#include "finetune/data/micro_batch_stream.h"

#include <algorithm>
#include <string>

#include "finetune/data/rank_assignment.h"
#include "finetune/util/errors.h"

namespace finetune {

MicroBatchStream::MicroBatchStream(const std::vector<Sample>& samples, MicroBatchStreamConfig config)
    : samples_(samples), config_(config) {
  if (samples_.empty()) throw Error("the training set is empty (no row has a trainable token)");
  const int64_t group = config_.group_size;
  if (group < 1 || static_cast<int64_t>(samples_.size()) % group != 0) {
    throw Error("data stream: " + std::to_string(samples_.size()) + " rows do not form units of " +
                std::to_string(group));
  }
  if (group > 1 && config_.packing) throw Error("data stream: packing cannot keep units of several rows apart");
  config_.sampler.num_samples = static_cast<int64_t>(samples_.size()) / group;
  lengths_.assign(static_cast<size_t>(config_.sampler.num_samples), 0);
  for (size_t i = 0; i < samples_.size(); ++i) {
    lengths_[i / static_cast<size_t>(group)] += static_cast<int64_t>(samples_[i].input_ids.size());
  }
  start_epoch(0);
  if (micro_batches_per_epoch_ == 0) {
    throw Error("the training set has fewer rows than one global batch and --dataloader_drop_last is set");
  }
}

int64_t MicroBatchStream::steps_per_epoch() const {
  const int64_t accumulation = config_.gradient_accumulation_steps;
  return (micro_batches_per_epoch_ + accumulation - 1) / accumulation;
}

// A rank's share of the epoch's items (Note [One rule for ranks]) in micro-batches of batch_size.
std::vector<MicroBatchStream::Rows> MicroBatchStream::rank_share_of(const Rows& items, int rank) const {
  const Rows share = rank_share(items, config_.sampler.world_size, rank,
                                config_.sampler.drop_last ? RankPadding::drop_remainder : RankPadding::wrap_around);
  std::vector<Rows> batches;
  for (const auto& item : share) {
    if (batches.empty() || static_cast<int64_t>(batches.back().size()) == config_.batch_size) batches.emplace_back();
    batches.back().push_back(item);
  }
  if (config_.sampler.drop_last && !batches.empty() && static_cast<int64_t>(batches.back().size()) < config_.batch_size) {
    batches.pop_back();
  }
  return batches;
}

std::vector<std::vector<MicroBatchStream::Rows>> MicroBatchStream::packed_micro_batches(int64_t epoch) const {
  auto rows = pack_samples(epoch_order(config_.sampler, epoch), lengths_, config_.max_seq_length);
  // Best-fit decreasing creates rows longest-first; visiting them in that order would feed every
  // epoch its longest samples first. With shuffling the rows go in the epoch's own random order.
  if (config_.sampler.shuffle) {
    const auto order = epoch_permutation(static_cast<int64_t>(rows.size()), config_.sampler.seed, epoch);
    Rows shuffled;
    shuffled.reserve(rows.size());
    for (int64_t index : order) shuffled.push_back(std::move(rows[static_cast<size_t>(index)]));
    rows = std::move(shuffled);
  }
  std::vector<std::vector<Rows>> per_rank;
  for (int rank = 0; rank < config_.sampler.world_size; ++rank) per_rank.push_back(rank_share_of(rows, rank));
  return per_rank;
}

std::vector<std::vector<MicroBatchStream::Rows>> MicroBatchStream::sampled_micro_batches(int64_t epoch) const {
  SamplerConfig sampler = config_.sampler;
  std::vector<std::vector<Rows>> per_rank;
  for (int rank = 0; rank < sampler.world_size; ++rank) {
    sampler.rank = rank;
    std::vector<Rows> batches;
    for (const auto& batch : micro_batches(rank_indices(sampler, epoch), config_.batch_size, config_.group_by_length,
                                           lengths_, sampler.drop_last)) {
      Rows rows;
      for (int64_t index : batch) rows.push_back({index});
      batches.push_back(std::move(rows));
    }
    per_rank.push_back(std::move(batches));
  }
  return per_rank;
}

void MicroBatchStream::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  step_ = 0;
  rank_batches_ = config_.packing ? packed_micro_batches(epoch) : sampled_micro_batches(epoch);
  micro_batches_per_epoch_ = static_cast<int64_t>(rank_batches_.front().size());
  for (const auto& batches : rank_batches_) {
    if (static_cast<int64_t>(batches.size()) != micro_batches_per_epoch_) {
      throw Error("data stream: ranks got different numbers of micro-batches in epoch " + std::to_string(epoch));
    }
  }
}

void MicroBatchStream::load_state(const MicroBatchStreamState& state) {
  if (state.epoch < 0 || state.steps_into_epoch < 0) throw Error("data position: negative epoch or step");
  start_epoch(state.epoch);
  step_ = std::min(state.steps_into_epoch, steps_per_epoch());
}

// The step's items in the literal rule's global order: micro-batch by micro-batch, item k of every
// rank before item k + 1 (Note [One rule for ranks]).
MicroBatchStream::Rows MicroBatchStream::step_items(int64_t step) const {
  const int64_t first = step * config_.gradient_accumulation_steps;
  const int64_t end = std::min(first + config_.gradient_accumulation_steps, micro_batches_per_epoch_);
  Rows items;
  for (int64_t m = first; m < end; ++m) {
    for (int64_t k = 0; k < config_.batch_size; ++k) {
      for (const auto& batches : rank_batches_) {
        const Rows& batch = batches[static_cast<size_t>(m)];
        if (k < static_cast<int64_t>(batch.size())) items.push_back(batch[static_cast<size_t>(k)]);
      }
    }
  }
  return items;
}

std::vector<HostBatch> MicroBatchStream::literal_step(int64_t step) const {
  const auto& batches = rank_batches_[static_cast<size_t>(config_.sampler.rank)];
  const int64_t first = step * config_.gradient_accumulation_steps;
  const int64_t end = std::min(first + config_.gradient_accumulation_steps, micro_batches_per_epoch_);
  std::vector<HostBatch> micro_batches;
  for (int64_t m = first; m < end; ++m) {
    micro_batches.push_back(collate_units(batches[static_cast<size_t>(m)]));
  }
  return micro_batches;
}

// A micro-batch's units as rows: member k of every unit before member k + 1.
HostBatch MicroBatchStream::collate_units(const Rows& units) const {
  if (config_.group_size == 1) return collate_rows(samples_, units, config_.pad_token_id);
  Rows rows;
  for (int64_t member = 0; member < config_.group_size; ++member) {
    for (const auto& unit : units) rows.push_back({unit.at(0) * config_.group_size + member});
  }
  HostBatch batch = collate_rows(samples_, rows, config_.pad_token_id);
  for (const auto& unit : units) batch.group_ids.push_back(unit.at(0));
  return batch;
}

std::vector<HostBatch> MicroBatchStream::balanced_step(int64_t step) const {
  const Rows items = step_items(step);
  std::vector<StepItem> planned;
  StepPlannerConfig planner;
  planner.world_size = config_.sampler.world_size;
  planner.padded_rows = !config_.padding_free;
  planner.token_budget = config_.group_size * config_.batch_size * config_.max_seq_length;
  for (const auto& row : items) {
    std::vector<int64_t> row_lengths;
    if (config_.group_size == 1) {
      for (int64_t index : row) row_lengths.push_back(lengths_[static_cast<size_t>(index)]);
      planned.push_back(packed_row_step_item(row_lengths));
    } else {
      for (int64_t member = 0; member < config_.group_size; ++member) {
        row_lengths.push_back(
            static_cast<int64_t>(samples_[static_cast<size_t>(row.at(0) * config_.group_size + member)].input_ids.size()));
      }
      planned.push_back(grouped_rows_step_item(row_lengths));
    }
    // A sample longer than max_seq_length (a --raw_text_file chunk, an ORPO prompt) still fits a
    // micro-batch alone.
    const StepItem& item = planned.back();
    planner.token_budget =
        std::max(planner.token_budget, planner.padded_rows ? item.padded_size(item.longest_row) : item.tokens);
  }
  const StepPlan plan = plan_step_balanced(planned, planner);
  auto collate_positions = [&](const std::vector<int64_t>& positions) {
    if (positions.empty()) return HostBatch{};  // zero weight: rows == 0
    Rows rows;
    for (int64_t position : positions) rows.push_back(items[static_cast<size_t>(position)]);
    return collate_units(rows);
  };
  std::vector<HostBatch> micro_batches;
  for (const auto& positions : plan[static_cast<size_t>(config_.sampler.rank)]) {
    micro_batches.push_back(collate_positions(positions));
  }
  return micro_batches;
}

std::vector<HostBatch> MicroBatchStream::next_step() {
  if (step_ >= steps_per_epoch()) start_epoch(epoch_ + 1);
  const int64_t step = step_++;
  return config_.planning == StepPlanning::literal ? literal_step(step) : balanced_step(step);
}

}  // namespace finetune
