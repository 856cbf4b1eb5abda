// The literal rank rule (see Note [One rule for ranks] in rank_assignment.h).
#include "finetune/data/rank_assignment.h"

#include <string>

#include "finetune/util/errors.h"

namespace finetune {

std::vector<int64_t> rank_positions(int64_t global_count, int world_size, int rank, RankPadding padding) {
  if (world_size < 1) throw Error("rank assignment: world_size must be >= 1, got " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size) {
    throw Error("rank assignment: rank " + std::to_string(rank) + " outside [0, " + std::to_string(world_size) + ")");
  }
  if (global_count < 0) throw Error("rank assignment: negative item count " + std::to_string(global_count));
  const int64_t world = world_size;
  int64_t padded = global_count;
  if (padding == RankPadding::drop_remainder) {
    padded = global_count / world * world;
  } else if (padding == RankPadding::wrap_around && global_count > 0) {
    padded = (global_count + world - 1) / world * world;  // like torch's DistributedSampler
  }
  std::vector<int64_t> positions;
  positions.reserve(static_cast<size_t>(padded / world + 1));
  for (int64_t position = rank; position < padded; position += world) positions.push_back(position % global_count);
  return positions;
}

std::vector<std::vector<std::vector<int64_t>>> literal_step_assignment(const std::vector<int64_t>& step_items,
                                                                       int world_size, int64_t batch_size) {
  if (batch_size < 1) throw Error("rank assignment: batch_size must be >= 1, got " + std::to_string(batch_size));
  if (world_size < 1) throw Error("rank assignment: world_size must be >= 1, got " + std::to_string(world_size));
  std::vector<std::vector<std::vector<int64_t>>> per_rank(static_cast<size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) {
    auto& batches = per_rank[static_cast<size_t>(rank)];
    for (int64_t item : rank_share(step_items, world_size, rank, RankPadding::none)) {
      if (batches.empty() || static_cast<int64_t>(batches.back().size()) == batch_size) batches.emplace_back();
      batches.back().push_back(item);
    }
  }
  return per_rank;
}

}  // namespace finetune
