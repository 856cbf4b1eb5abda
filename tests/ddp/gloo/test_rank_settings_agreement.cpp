// Note [Ranks agree before the first step], through a real rendezvous store and Gloo ranks: every
// rank reaches the same verdict, in seconds.
#include <gtest/gtest.h>

#include <chrono>

#include "../../test_support.h"
#include "../ddp_test_helpers.h"
#include "finetune/ddp/rank_settings.h"

namespace finetune {
namespace {

std::vector<RankSetting> settings_of_rank(int rank, const std::string& rank1_learning_rate) {
  return {{"--model_name", "config sha256 1f2e"},
          {"--learning_rate", rank == 1 ? rank1_learning_rate : "0.0002"},
          {"--max_steps", "60"}};
}

TEST(RankSettingsAgreement, EqualSettingsPass) {
  testing::run_ranks(3, [](int rank, Communicator& communicator) {
    check_ranks_agree(communicator, settings_of_rank(rank, "0.0002"));
    communicator.barrier("after the check");
  });
}

TEST(RankSettingsAgreement, EveryRankRefusesTheSameDifferenceWithinSeconds) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = testing::run_ranks_collecting(3, /*timeout_seconds=*/60, [](int rank, Communicator& communicator) {
    check_ranks_agree(communicator, settings_of_rank(rank, "0.001"));
    communicator.barrier("never reached");
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);  // the DDP timeout is 60 s: nobody waited for it
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(errors[rank]) << "rank " << rank << " did not refuse";
    const auto message = testing::describe(errors[rank]);
    testing::expect_contains(message, {"different --learning_rate", "rank 0 has '0.0002'", "rank 1 has '0.001'"});
  }
}

}  // namespace
}  // namespace finetune
