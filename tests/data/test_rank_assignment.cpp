// The one rank rule (Note [One rule for ranks]): padding modes, and its step-shaped form.
#include <gtest/gtest.h>

#include <string>

#include "finetune/data/rank_assignment.h"
#include "finetune/data/sampler.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using Positions = std::vector<int64_t>;

TEST(RankAssignment, WrapAroundPadsFromTheStartLikeDistributedSampler) {
  EXPECT_EQ(rank_positions(10, 3, 0, RankPadding::wrap_around), (Positions{0, 3, 6, 9}));
  EXPECT_EQ(rank_positions(10, 3, 1, RankPadding::wrap_around), (Positions{1, 4, 7, 0}));
  EXPECT_EQ(rank_positions(10, 3, 2, RankPadding::wrap_around), (Positions{2, 5, 8, 1}));
  // Fewer items than ranks: the wrap repeats them again and again.
  EXPECT_EQ(rank_positions(2, 5, 4, RankPadding::wrap_around), (Positions{0}));
  EXPECT_EQ(rank_positions(2, 5, 3, RankPadding::wrap_around), (Positions{1}));
  EXPECT_TRUE(rank_positions(0, 3, 1, RankPadding::wrap_around).empty());
}

TEST(RankAssignment, DropRemainderAndNoPadding) {
  EXPECT_EQ(rank_positions(10, 3, 0, RankPadding::drop_remainder), (Positions{0, 3, 6}));
  EXPECT_EQ(rank_positions(10, 3, 2, RankPadding::drop_remainder), (Positions{2, 5, 8}));
  EXPECT_EQ(rank_positions(10, 3, 0, RankPadding::none), (Positions{0, 3, 6, 9}));
  EXPECT_EQ(rank_positions(10, 3, 1, RankPadding::none), (Positions{1, 4, 7}));
  EXPECT_TRUE(rank_positions(2, 5, 3, RankPadding::none).empty());
}

TEST(RankAssignment, RankShareTakesTheItemsAtThePositions) {
  const std::vector<std::string> rows = {"a", "b", "c", "d", "e"};
  EXPECT_EQ(rank_share(rows, 2, 1, RankPadding::wrap_around), (std::vector<std::string>{"b", "d", "a"}));
  EXPECT_EQ(rank_share(rows, 2, 1, RankPadding::drop_remainder), (std::vector<std::string>{"b", "d"}));
}

// The step-shaped form deals one step's slice of the padded order exactly as the sampler's
// epoch-level share followed by micro_batches does.
TEST(RankAssignment, StepFormEqualsTheSamplersMicroBatches) {
  const int64_t batch = 2;
  const int64_t accumulation = 3;
  for (int64_t n : {1, 7, 24, 25, 61}) {
    for (int world : {1, 2, 3, 4}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world));
      const Positions order = epoch_permutation(n, 11, 1);
      Positions padded;
      for (int64_t p = 0; p < (n + world - 1) / world * world; ++p) padded.push_back(order[static_cast<size_t>(p % n)]);
      std::vector<std::vector<std::vector<int64_t>>> sampler_batches;
      for (int rank = 0; rank < world; ++rank) {
        const SamplerConfig config{n, world, rank, 11, true, false};
        sampler_batches.push_back(micro_batches(rank_indices(config, 1), batch, false, {}, false));
      }
      const size_t step_items = static_cast<size_t>(world * batch * accumulation);
      size_t micro_batch = 0;
      for (size_t begin = 0; begin < padded.size(); begin += step_items) {
        const Positions slice(padded.begin() + static_cast<std::ptrdiff_t>(begin),
                              padded.begin() + static_cast<std::ptrdiff_t>(std::min(padded.size(), begin + step_items)));
        const auto plan = literal_step_assignment(slice, world, batch);
        ASSERT_EQ(plan.size(), static_cast<size_t>(world));
        for (int rank = 0; rank < world; ++rank) {
          const auto& mine = plan[static_cast<size_t>(rank)];
          ASSERT_EQ(mine.size(), plan[0].size()) << "ranks agree on the number of micro-batches";
          for (size_t m = 0; m < mine.size(); ++m) {
            EXPECT_EQ(mine[m], sampler_batches[static_cast<size_t>(rank)].at(micro_batch + m)) << "rank " << rank;
          }
        }
        micro_batch += plan[0].size();
      }
      EXPECT_EQ(micro_batch, sampler_batches[0].size());
    }
  }
}

TEST(RankAssignment, RejectsBadArguments) {
  EXPECT_THROW(rank_positions(4, 0, 0, RankPadding::none), Error);
  EXPECT_THROW(rank_positions(4, 2, 2, RankPadding::none), Error);
  EXPECT_THROW(rank_positions(4, 2, -1, RankPadding::none), Error);
  EXPECT_THROW(rank_positions(-1, 2, 0, RankPadding::none), Error);
  EXPECT_THROW(literal_step_assignment({1, 2}, 2, 0), Error);
  EXPECT_THROW(literal_step_assignment({1, 2}, 0, 1), Error);
}

}  // namespace
}  // namespace finetune
