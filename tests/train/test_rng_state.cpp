// The generators as a trainer component: seeded when built, restored from state().
#include <gtest/gtest.h>

#include "finetune/ddp/communicator.h"
#include "finetune/train/rng_state.h"

namespace finetune {
namespace {

TEST(TrainingGenerators, StateRestoresTheDraws) {
  auto communicator = make_communicator(LaunchEnv{}, at::kCPU, CommunicatorOptions{});
  TrainingGenerators generators(at::kCPU, *communicator, 3);
  const auto first = at::rand({4});
  TrainingGenerators reseeded(at::kCPU, *communicator, 3);
  EXPECT_TRUE(at::equal(at::rand({4}), first));  // seeded when built
  const auto state = generators.state();
  ASSERT_EQ(state.size(), 1u);
  const auto next = at::rand({4});
  generators.load_state(state);
  EXPECT_TRUE(at::equal(at::rand({4}), next));
  // States of another world size are not this rank's: the generators stay as they are.
  const auto two_ranks = std::vector<GeneratorStates>{state[0], state[0]};
  const auto before = generators.state();
  generators.load_state(two_ranks);
  EXPECT_TRUE(at::equal(generators.state()[0].cpu, before[0].cpu));
}

}  // namespace
}  // namespace finetune
