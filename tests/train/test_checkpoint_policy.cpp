// When the trainer evaluates and saves, the best metric and early stopping, against HF's own code:
// the fixture drives TrainingArguments, DefaultFlowCallback, EarlyStoppingCallback and
// Trainer._determine_best_metric in the order of Trainer._inner_training_loop over given eval
// losses (tests/reference/make_train_fixtures.py), and the CheckpointPolicy, driven as the
// Trainer drives it (train/trainer.cpp), must evaluate and save at the same steps, stop after the
// same step and find the same best metric and step. One order differs by design (Note [Evaluation
// and save timing]): the "steps" strategy's evaluation at the last step comes after that step's
// save here, before it in HF, so each step's events are compared as a set.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../reference/fixtures.h"
#include "finetune/train/checkpoint_policy.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using Events = std::set<std::pair<int64_t, std::string>>;  // (step, "evaluate" | "save")

TEST(CheckpointPolicy, MatchesHfCallbacksAndBestMetric) {
  const auto fixture = reference::load_json_fixture("train", "checkpoint_policy.json");
  ASSERT_GE(fixture.at("cases").size(), 10u);
  int early_stops = 0;
  for (const auto& c : fixture.at("cases")) {
    CheckpointPolicyConfig config;
    config.eval_strategy = interval_strategy_from_name(c.at("eval_strategy"));
    config.save_strategy = interval_strategy_from_name(c.at("save_strategy"));
    config.eval_steps = c.at("eval_steps");
    config.save_steps = c.at("save_steps");
    config.early_stopping_patience = c.at("patience");
    config.early_stopping_threshold = c.at("threshold");
    config.greater_is_better = c.at("greater_is_better");
    const int64_t total = c.at("max_steps");
    SCOPED_TRACE(c.dump());
    CheckpointPolicy policy(config, c.at("steps_per_epoch"), total);
    auto losses = c.at("losses").get<std::vector<double>>();
    size_t next_loss = 0;
    Events events;
    auto evaluate = [&](int64_t step) {
      ASSERT_LT(next_loss, losses.size()) << "an evaluation HF does not run, at step " << step;
      events.emplace(step, "evaluate");
      policy.record_evaluation(step, losses[next_loss++]);
    };
    int64_t last_step = 0;
    for (int64_t step = 1; step <= total; ++step) {  // Trainer::train / after_step
      last_step = step;
      if (policy.evaluate_at(step)) evaluate(step);
      if (policy.save_at(step)) events.emplace(step, "save");
      if (policy.should_stop()) break;
    }
    if (policy.evaluate_after_training(last_step)) evaluate(last_step);  // Trainer::finish

    Events expected;
    for (const auto& event : c.at("events")) expected.emplace(event.at(1).get<int64_t>(), event.at(0).get<std::string>());
    EXPECT_EQ(events, expected);
    EXPECT_EQ(last_step, c.at("last_step").get<int64_t>());
    EXPECT_EQ(next_loss, static_cast<size_t>(std::count_if(c.at("events").begin(), c.at("events").end(), [](const auto& e) {
                return e.at(0) == "evaluate";
              })));  // the same losses consumed (the fixture holds more than a stopped run reads)
    early_stops += last_step < total;
    if (c.at("best_metric").is_null()) {
      EXPECT_FALSE(policy.best_metric().has_value());
    } else {
      ASSERT_TRUE(policy.best_metric().has_value());
      EXPECT_EQ(*policy.best_metric(), c.at("best_metric").get<double>());
    }
    // HF records the best step only when checkpoints are saved (save_strategy steps or epoch).
    if (!c.at("best_step").is_null()) {
      EXPECT_EQ(policy.best_step(), c.at("best_step").get<int64_t>());
    }
  }
  EXPECT_GE(early_stops, 3) << "the fixture lost its early-stopping cases";
}

// A resumed run rebuilds the best metric, its step and the patience counter from the log history
// (metrics.jsonl's lines, which the checkpoint keeps), so it stops where the whole run would.
TEST(CheckpointPolicy, ReplayedHistoryContinuesLikeTheUninterruptedRun) {
  CheckpointPolicyConfig config;
  config.eval_steps = 1;
  config.save_steps = 1;
  config.early_stopping_patience = 2;
  const std::vector<double> losses = {3.0, 2.0, 2.5, 1.5, 1.6, 1.7, 1.0};
  CheckpointPolicy whole(config, 10, 10);
  std::vector<nlohmann::json> history;
  for (int64_t step = 1; step <= 3; ++step) {
    whole.record_evaluation(step, losses[step - 1]);
    history.push_back({{"step", step}, {"loss", 9.0}, {"eval_loss", losses[step - 1]}});
    history.push_back({{"step", step}, {"loss", 9.0}});  // a line without an evaluation
  }
  CheckpointPolicy resumed(config, 10, 10);
  resumed.replay(history);
  EXPECT_EQ(resumed.best_metric(), whole.best_metric());
  EXPECT_EQ(resumed.best_step(), whole.best_step());
  EXPECT_EQ(resumed.patience_counter(), 1);
  for (int64_t step = 4; step <= 6; ++step) {
    whole.record_evaluation(step, losses[step - 1]);
    resumed.record_evaluation(step, losses[step - 1]);
    EXPECT_EQ(resumed.should_stop(), whole.should_stop()) << step;
  }
  EXPECT_TRUE(resumed.should_stop());  // 1.6 and 1.7 after the best, 1.5
  EXPECT_EQ(resumed.best_step(), 4);
}

TEST(CheckpointPolicy, StrategyNamesAreHfs) {
  EXPECT_EQ(interval_strategy_names(), (std::vector<std::string>{"no", "steps", "epoch"}));
  for (const auto& name : interval_strategy_names()) {
    EXPECT_EQ(interval_strategy_name(interval_strategy_from_name(name)), name);
  }
  EXPECT_THROW(interval_strategy_from_name("best"), Error);
}

}  // namespace
}  // namespace finetune
