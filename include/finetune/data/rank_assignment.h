// Which work items go to which rank: the one rule the sampler, the packing path and evaluation
// share. Pure functions, LibTorch-free.
//
// Note [One rule for ranks]
// Every rank holds the same global, ordered list of work items (an epoch's sample order, or its
// packed rows; for evaluation the samples in file order). The rule is torch's DistributedSampler:
// the list is first brought to a multiple of the world size (RankPadding), then rank r takes
// positions r, r + world, r + 2*world, ... Consequently, without --group_by_length, optimizer step
// s of `accumulation` micro-batches of `batch` items covers exactly the global positions
// [s * G, (s + 1) * G) with G = world * batch * accumulation, and within it rank r's micro-batch m
// holds the positions m * world * batch + r + k * world (k < batch): literal_step_assignment says
// that step-shaped form, "one optimizer step's global items -> per rank, its micro-batches", which
// is also the shape of a step planner that balances ranks by tokens (issue 25) and can replace it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace finetune {

enum class RankPadding {
  wrap_around,     // repeat items from the start (again and again if fewer than world) up to a multiple of world
  drop_remainder,  // leave out the last (count % world) items
  none,            // no padding: the first (count % world) ranks take one item more (evaluation: each item once)
};

// The positions into a global list of `global_count` items that rank `rank` takes, in order. With
// wrap_around the padding repeats positions from the start; every position is < global_count.
std::vector<int64_t> rank_positions(int64_t global_count, int world_size, int rank, RankPadding padding);

// rank_positions applied to the list itself.
template <typename Item>
std::vector<Item> rank_share(const std::vector<Item>& global, int world_size, int rank, RankPadding padding) {
  std::vector<Item> share;
  const auto positions = rank_positions(static_cast<int64_t>(global.size()), world_size, rank, padding);
  share.reserve(positions.size());
  for (int64_t position : positions) share.push_back(global[static_cast<size_t>(position)]);
  return share;
}

// The same rule for one optimizer step: `step_items` (the step's slice of the padded global order,
// at most world * batch * accumulation items) -> for each rank, its micro-batches of up to `batch`
// items. Item i goes to rank i % world; ranks get equal numbers of micro-batches when the slice is
// a multiple of world (as the padded order's slices are).
std::vector<std::vector<std::vector<int64_t>>> literal_step_assignment(const std::vector<int64_t>& step_items,
                                                                       int world_size, int64_t batch_size);

}  // namespace finetune
