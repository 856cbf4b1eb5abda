// "Do it on rank 0, then agree" (ddp/rank0_agreement.h): only rank 0 works, and every rank learns
// its outcome from one collective, a failure included.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "../ddp_test_helpers.h"
#include "finetune/ddp/rank0_agreement.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using testing::run_ranks;

TEST(Rank0Agreement, OnlyRankZeroWorksAndEveryRankLearnsItSucceeded) {
  std::atomic<int> calls{0};
  std::vector<Rank0Outcome> outcomes(3);
  run_ranks(3, [&](int rank, Communicator& communicator) {
    outcomes[rank] = run_on_rank0_then_agree(communicator, at::kCPU, "test work", [&] { ++calls; });
  });
  EXPECT_EQ(calls.load(), 1);
  for (const auto& outcome : outcomes) {
    EXPECT_FALSE(outcome.failed);
    EXPECT_EQ(outcome.error, "");
  }
}

TEST(Rank0Agreement, EveryRankLearnsThatRankZeroFailed) {
  std::vector<Rank0Outcome> outcomes(2);
  run_ranks(2, [&](int rank, Communicator& communicator) {
    outcomes[rank] = run_on_rank0_then_agree(communicator, at::kCPU, "final save",
                                             [] { throw std::runtime_error("disk full"); });
  });
  EXPECT_TRUE(outcomes[0].failed);
  EXPECT_EQ(outcomes[0].message("final save"), "disk full");
  EXPECT_TRUE(outcomes[1].failed);
  EXPECT_EQ(outcomes[1].error, "");
  EXPECT_EQ(outcomes[1].message("final save"), "final save failed on rank 0");
}

TEST(Rank0Agreement, AWorldOfOneRunsTheWorkItself) {
  auto communicator = make_communicator(LaunchEnv{}, at::kCPU, CommunicatorOptions{});
  bool ran = false;
  EXPECT_FALSE(run_on_rank0_then_agree(*communicator, at::kCPU, "work", [&] { ran = true; }).failed);
  EXPECT_TRUE(ran);
  const auto failed = run_on_rank0_then_agree(*communicator, at::kCPU, "work", [] { throw Error("no"); });
  EXPECT_TRUE(failed.failed);
  EXPECT_EQ(failed.message("work"), "no");
}

}  // namespace
}  // namespace finetune
