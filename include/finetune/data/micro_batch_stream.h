// The rank's stream of optimizer steps, each a list of micro-batches (gradient accumulation),
// epoch after epoch.
//
// Which items form optimizer step s of an epoch is the literal rule's answer (Note [One rule for
// ranks] in rank_assignment.h): the union over ranks of each rank's micro-batches s*A .. s*A+A-1
// (A = gradient_accumulation_steps), a rank's micro-batch being batch_size consecutive items of its
// share. Without packing an item is a sample and a rank's share is the sampler's (rank_indices,
// sorted within windows with group_by_length). With packing the whole epoch order (shared by all
// ranks) is packed into rows of at most max_seq_length tokens, an item is a row, and the rows are
// dealt like samples (round-robin, padded by wrapping to a multiple of the world size).
//
// How a step's items are spread over ranks and micro-batches is the step planning
// (data/step_planner.h, --step_planning): literal keeps each rank's own micro-batches; balanced
// plans the whole step on every rank (the same plan everywhere: a pure function of the step's
// items, which follow from (seed, epoch, step)) and takes this rank's share, micro-batches formed
// by a token budget of batch_size x max_seq_length. Either way every rank gets the same number of
// micro-batches per step; a balanced rank's surplus ones are empty (HostBatch::rows == 0): zero
// weight, the rank still takes part in the step's collectives. An optimizer step never spans two
// epochs: the last step of an epoch takes the micro-batches that are left (as HF's Trainer does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "finetune/data/batch.h"
#include "finetune/data/sample.h"
#include "finetune/data/sampler.h"
#include "finetune/data/step_planner.h"

namespace finetune {

struct MicroBatchStreamConfig {
  SamplerConfig sampler;
  int64_t batch_size = 1;
  int64_t gradient_accumulation_steps = 1;
  bool group_by_length = false;
  bool packing = false;
  int64_t max_seq_length = 2048;  // row capacity when packing
  int64_t pad_token_id = 0;
  StepPlanning planning = StepPlanning::balanced;
  // The trainer lays micro-batches out padding-free (KernelPolicy::padding_free_batches): the
  // balanced plan's budget then counts tokens, otherwise rows times the longest row.
  bool padding_free = false;
  // Rows per unit: 1, or 2 for preference pairs. Units are `group_size` consecutive samples (unit
  // u: samples group_size*u ..), dealt, sampled and planned whole, so a pair is always in one
  // micro-batch on one rank (no packing). A micro-batch's rows are the first member of each of its
  // units, then the second of each, ...: TRL's [chosen..., rejected...] (train/dpo_objective.h).
  // batch_size counts units, and a micro-batch's token budget is group_size x batch_size x
  // max_seq_length.
  int64_t group_size = 1;
};

// Where the next optimizer step starts: the epoch and the optimizer steps already taken in it
// (portable across world sizes with the same global batch). steps_into_epoch may equal
// steps_per_epoch(): the next step starts the following epoch.
struct MicroBatchStreamState {
  int64_t epoch = 0;
  int64_t steps_into_epoch = 0;
};

class MicroBatchStream {
 public:
  MicroBatchStream(const std::vector<Sample>& samples, MicroBatchStreamConfig config);

  int64_t steps_per_epoch() const;
  StepPlanning planning() const { return config_.planning; }

  // This rank's micro-batches of the next optimizer step (1..gradient_accumulation_steps of them
  // with literal planning; with balanced as many as the plan's busiest rank needs, empty ones
  // included). Every rank gets the same number.
  std::vector<HostBatch> next_step();

  MicroBatchStreamState state() const { return {epoch_, step_}; }
  // Continues from a state (resume): the next step is the one after state.steps_into_epoch steps
  // of state.epoch.
  void load_state(const MicroBatchStreamState& state);

 private:
  using Rows = std::vector<std::vector<int64_t>>;  // rows -> their samples
  void start_epoch(int64_t epoch);
  std::vector<Rows> rank_share_of(const Rows& items, int rank) const;
  std::vector<std::vector<Rows>> packed_micro_batches(int64_t epoch) const;
  std::vector<std::vector<Rows>> sampled_micro_batches(int64_t epoch) const;
  Rows step_items(int64_t step) const;
  std::vector<HostBatch> literal_step(int64_t step) const;
  std::vector<HostBatch> balanced_step(int64_t step) const;
  HostBatch collate_units(const Rows& units) const;

  const std::vector<Sample>& samples_;
  MicroBatchStreamConfig config_;
  std::vector<int64_t> lengths_;  // per unit: its samples' tokens
  std::vector<std::vector<Rows>> rank_batches_;  // rank -> micro-batch -> rows -> samples, this epoch
  int64_t micro_batches_per_epoch_ = 0;          // per rank (the same on every rank)
  int64_t epoch_ = 0;
  int64_t step_ = 0;  // steps taken in epoch_
};

}  // namespace finetune
