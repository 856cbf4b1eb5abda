// evaluate_across_ranks: ranks score disjoint shares (Note [One rule for ranks], unpadded), and
// every rank gets the single-process mean loss, also when the samples do not divide evenly.
#include <gtest/gtest.h>

#include "../../ddp/ddp_test_helpers.h"
#include "../evaluate_test_model.h"
#include "finetune/train/evaluate.h"

namespace finetune {
namespace {

TEST(EvaluateAcrossRanks, EveryRankGetsTheSingleProcessMeanLoss) {
  const auto reference_model = evaluate_test::random_model();
  const auto data = evaluate_test::samples();
  const double expected = evaluate(*reference_model, data, {0, 1, 2, 3, 4}, 1, 0).mean_loss();
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    testing::run_ranks(world, [&](int, Communicator& communicator) {
      const auto model = evaluate_test::random_model();
      const double got = evaluate_across_ranks(*model, data, communicator, 1, 0);
      EXPECT_NEAR(got, expected, 1e-12 * expected);
    });
  }
}

}  // namespace
}  // namespace finetune
