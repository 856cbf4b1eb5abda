// The step planner: a valid plan (every item once, budgets, equal micro-batch counts), the literal
// rule in the same shape, determinism, and the balanced plan's efficiency on fixed samples.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "finetune/data/rank_assignment.h"
#include "finetune/data/step_planner.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Log-normal lengths from mt19937_64 by Box-Muller written out (std::normal_distribution's
// algorithm differs between standard libraries), clipped to [1, max_length].
std::vector<StepItem> log_normal_samples(size_t count, double median, double sigma, int64_t max_length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0; };
  std::vector<StepItem> items;
  while (items.size() < count) {
    const double normal = std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * 3.14159265358979323846 * uniform());
    const auto length = static_cast<int64_t>(std::llround(median * std::exp(sigma * normal)));
    items.push_back(sample_step_item(std::clamp<int64_t>(length, 1, max_length)));
  }
  return items;
}

void expect_valid(const StepPlan& plan, const std::vector<StepItem>& items, int world, int64_t budget) {
  ASSERT_EQ(plan.size(), static_cast<size_t>(world));
  std::vector<int> seen(items.size(), 0);
  for (const auto& batches : plan) {
    EXPECT_EQ(batches.size(), plan[0].size()) << "ranks agree on the number of micro-batches";
    for (const auto& batch : batches) {
      int64_t tokens = 0;
      for (int64_t position : batch) {
        tokens += items.at(static_cast<size_t>(position)).tokens;
        ++seen[static_cast<size_t>(position)];
      }
      EXPECT_LE(tokens, budget);
    }
  }
  for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(seen[i], 1) << "item " << i;
}

TEST(StepPlanner, BalancedPlanIsValidAndDeterministic) {
  for (int world : {1, 2, 3, 8}) {
    for (size_t count : {size_t{1}, size_t{5}, size_t{32}, size_t{64}}) {
      SCOPED_TRACE("world " + std::to_string(world) + " items " + std::to_string(count));
      const auto items = log_normal_samples(count, 200, 0.6, 2048, 7 + count);
      StepPlannerConfig config;
      config.world_size = world;
      config.token_budget = 2048;
      const StepPlan plan = plan_step_balanced(items, config);
      expect_valid(plan, items, world, config.token_budget);
      EXPECT_EQ(plan, plan_step_balanced(items, config));
    }
  }
}

TEST(StepPlanner, MicroBatchesRespectATightBudget) {
  // Budget 10: items of 6, 5, 5, 4, 3 tokens cannot share freely.
  const std::vector<StepItem> items = {sample_step_item(6), sample_step_item(5), sample_step_item(5),
                                       sample_step_item(4), sample_step_item(3)};
  StepPlannerConfig config;
  config.world_size = 1;
  config.token_budget = 10;
  const StepPlan plan = plan_step_balanced(items, config);
  expect_valid(plan, items, 1, 10);
  // First-fit decreasing: {6, 4}, {5, 5}, {3}.
  EXPECT_EQ(plan[0], (std::vector<std::vector<int64_t>>{{0, 3}, {1, 2}, {4}}));
}

// Padded micro-batches count rows x their longest row: {6}, {5, 5}, {4, 3} under a budget of 10
// (6 and 4 together would pad to 12; by tokens they form {6, 4}, {5, 5}, {3}).
TEST(StepPlanner, PaddedMicroBatchesCountTheirLongestRow) {
  const std::vector<StepItem> items = {sample_step_item(6), sample_step_item(5), sample_step_item(5),
                                       sample_step_item(4), sample_step_item(3)};
  StepPlannerConfig config;
  config.token_budget = 10;
  config.padded_rows = true;
  const StepPlan plan = plan_step_balanced(items, config);
  EXPECT_EQ(plan[0], (std::vector<std::vector<int64_t>>{{0}, {1, 2}, {3, 4}}));
}

// A preference pair is one item of two rows: placed whole, and in padded micro-batches it counts
// both rows at the width of the micro-batch's longest row. Budget 12, padded: (5, 3) alone is
// 2 x 5 = 10, with (4, 4) 4 x 5 = 20; (4, 4) is 8, with (2, 2) 4 x 4 = 16: three micro-batches.
// By tokens: 8 + 4 fits 12, 8 + 8 does not.
TEST(StepPlanner, PairsArePlacedWholeAndCountBothRows) {
  const std::vector<StepItem> items = {grouped_rows_step_item({5, 3}), grouped_rows_step_item({4, 4}),
                                       grouped_rows_step_item({2, 2})};
  EXPECT_EQ(items[0].tokens, 8);
  EXPECT_EQ(items[0].rows, 2);
  EXPECT_EQ(items[0].longest_row, 5);
  EXPECT_EQ(items[0].squared_tokens, 34);
  StepPlannerConfig config;
  config.token_budget = 12;
  config.padded_rows = true;
  EXPECT_EQ(plan_step_balanced(items, config)[0], (std::vector<std::vector<int64_t>>{{0}, {1}, {2}}));
  config.padded_rows = false;  // by tokens: 8 + 4 fits, 8 + 8 does not
  EXPECT_EQ(plan_step_balanced(items, config)[0], (std::vector<std::vector<int64_t>>{{0, 2}, {1}}));
  config.token_budget = 9;  // padded, a pair alone needs 2 x 5
  config.padded_rows = true;
  EXPECT_THROW(plan_step_balanced(items, config), Error);
}

// A rank without items would feed no gradient at all (the reducer's unused-parameter error):
// with at least world items every rank gets one, however skewed the items.
TEST(StepPlanner, EveryRankGetsAnItemWhenThereAreEnough) {
  for (int world : {2, 4, 8}) {
    std::vector<StepItem> items = {sample_step_item(2000)};
    for (int i = 1; i < world; ++i) items.push_back(sample_step_item(1 + i));
    StepPlannerConfig config;
    config.world_size = world;
    const StepPlan plan = plan_step_balanced(items, config);
    for (const auto& batches : plan) {
      ASSERT_FALSE(batches.empty());
      EXPECT_FALSE(batches.front().empty()) << "world " << world;
    }
  }
}

TEST(StepPlanner, NamesOfThePlannings) {
  EXPECT_EQ(step_planning_names(), (std::vector<std::string>{"balanced", "literal"}));
  for (const auto& name : step_planning_names()) EXPECT_EQ(step_planning_name(step_planning_from_name(name)), name);
  EXPECT_THROW(step_planning_from_name("greedy"), Error);
}

TEST(StepPlanner, LiteralPlanIsTheRankRule) {
  const auto items = log_normal_samples(12, 200, 0.6, 2048, 3);
  const StepPlan plan = plan_step_literal(items, 3, 2);
  std::vector<int64_t> positions(items.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  EXPECT_EQ(plan, literal_step_assignment(positions, 3, 2));
  EXPECT_EQ(plan[1], (std::vector<std::vector<int64_t>>{{1, 4}, {7, 10}}));
  // An uneven slice: ranks are padded with an empty (zero-weight) micro-batch.
  const StepPlan uneven = plan_step_literal(std::vector<StepItem>(items.begin(), items.begin() + 4), 3, 1);
  EXPECT_EQ(uneven[2], (std::vector<std::vector<int64_t>>{{2}, {}}));
}

// Issue 25's setting: per_device_train_batch_size 1, gradient_accumulation_steps 4, max_seq_length
// 2048, at 8 ranks, over 50 fixed steps: log-normal lengths of the bench (median 200, sigma 0.6),
// and alpaca-cleaned's (median 158.7, sigma 0.631: bench/alpaca_lengths.py's fit with the Llama-3
// tokenizer), where the balanced plan's mean efficiency is >= 0.95 (issue 25's bound); the literal
// rule's is lower on both.
TEST(StepPlanner, BalancedPlanIsEfficientAtEightRanks) {
  struct Lengths {
    const char* name;
    double median, sigma, bound;
  };
  for (const Lengths& lengths : {Lengths{"bench", 200, 0.6, 0.95}, Lengths{"alpaca", 158.7, 0.631, 0.95}}) {
    const int world = 8;
    StepPlannerConfig config;
    config.world_size = world;
    config.token_budget = 1 * 2048;
    double balanced = 0, literal = 0;
    const int steps = 50;
    for (int step = 0; step < steps; ++step) {
      const auto items =
          log_normal_samples(static_cast<size_t>(world * 4), lengths.median, lengths.sigma, 2048, 1000 + step);
      balanced += step_plan_efficiency(plan_step_balanced(items, config), items, config.cost);
      literal += step_plan_efficiency(plan_step_literal(items, world, 1), items, config.cost);
    }
    balanced /= steps;
    literal /= steps;
    EXPECT_GE(balanced, lengths.bound) << lengths.name;
    EXPECT_GT(balanced, literal) << lengths.name;
    RecordProperty(std::string(lengths.name) + "_balanced_efficiency", std::to_string(balanced));
    RecordProperty(std::string(lengths.name) + "_literal_efficiency", std::to_string(literal));
  }
}

TEST(StepPlanner, CostModelAndEfficiency) {
  StepCostModel cost;
  cost.per_token = 1;
  cost.per_squared_token = 0.5;
  cost.per_micro_batch = 10;
  const std::vector<StepItem> items = {packed_row_step_item({2, 3}), sample_step_item(4)};
  EXPECT_EQ(items[0].tokens, 5);
  EXPECT_EQ(items[0].squared_tokens, 13);
  EXPECT_DOUBLE_EQ(cost.item_cost(items[0]), 5 + 6.5);
  EXPECT_DOUBLE_EQ(rank_step_cost({{0}, {}}, items, cost), 10 + 11.5);
  // ranks 21.5 and 10 + 4 + 8 = 22: mean 21.75 over max 22
  EXPECT_DOUBLE_EQ(step_plan_efficiency({{{0}, {}}, {{1}, {}}}, items, cost), 21.75 / 22);
}

TEST(StepPlanner, RejectsItemsOverTheBudgetAndBadWorlds) {
  StepPlannerConfig config;
  config.token_budget = 100;
  EXPECT_THROW(plan_step_balanced({sample_step_item(101)}, config), Error);
  config.world_size = 0;
  EXPECT_THROW(plan_step_balanced({sample_step_item(1)}, config), Error);
  config.world_size = 2;
  EXPECT_EQ(plan_step_balanced({}, config), (StepPlan{{}, {}}));
}

}  // namespace
}  // namespace finetune
