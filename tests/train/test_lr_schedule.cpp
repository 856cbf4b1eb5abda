// Learning-rate schedules against transformers: lr_multiplier at every step 0..total equals the
// LambdaLR multiplier of get_scheduler(type, num_warmup_steps, num_training_steps), and
// resolve_warmup_steps equals TrainingArguments.get_warmup_steps. Both exactly: the C++ evaluates
// transformers' double expressions in the same order (cos is the same C library function), and
// warmup resolution is integer arithmetic after one ceil. Fixtures: make_train_fixtures.py.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "../reference/fixtures.h"
#include "finetune/train/lr_schedule.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

TEST(LrSchedule, MultiplierMatchesTransformersGetSchedulerAtEveryStep) {
  const auto fixture = reference::load_json_fixture("train", "lr_schedule.json");
  std::set<std::string> types;
  bool no_warmup = false, warmup_is_total = false;
  double worst = 0.0;
  for (const auto& s : fixture.at("schedules")) {
    LrSchedule schedule;
    schedule.type = s.at("type");
    schedule.warmup_steps = s.at("warmup");
    schedule.total_steps = s.at("total");
    types.insert(schedule.type);
    no_warmup |= schedule.warmup_steps == 0;
    warmup_is_total |= schedule.warmup_steps == schedule.total_steps;
    const auto expected = s.at("multipliers").get<std::vector<double>>();
    ASSERT_EQ(expected.size(), static_cast<size_t>(schedule.total_steps + 1));
    for (int64_t step = 0; step <= schedule.total_steps; ++step) {
      const double actual = lr_multiplier(schedule, step);
      EXPECT_EQ(actual, expected[step]) << schedule.type << " warmup " << schedule.warmup_steps << " total "
                                        << schedule.total_steps << " step " << step;
      worst = std::max(worst, std::abs(actual - expected[step]));
    }
  }
  EXPECT_EQ(types, (std::set<std::string>{"linear", "cosine", "constant", "constant_with_warmup"}));
  EXPECT_TRUE(no_warmup && warmup_is_total) << "the fixture lost its edge cases";
  RecordProperty("max_abs_error", std::to_string(worst));
}

TEST(LrSchedule, ResolveWarmupStepsMatchesTrainingArguments) {
  const auto fixture = reference::load_json_fixture("train", "lr_schedule.json");
  ASSERT_GE(fixture.at("warmup_steps").size(), 10u);
  for (const auto& c : fixture.at("warmup_steps")) {
    const int64_t steps = c.at("warmup_steps");
    const double ratio = c.at("warmup_ratio");
    const int64_t total = c.at("total");
    EXPECT_EQ(resolve_warmup_steps(steps, ratio, total), c.at("expected").get<int64_t>())
        << "warmup_steps " << steps << " warmup_ratio " << ratio << " total " << total;
  }
}

TEST(LrSchedule, UnknownTypeIsAUsageError) {
  LrSchedule schedule;
  schedule.type = "polynomial";
  EXPECT_THROW(lr_multiplier(schedule, 0), UsageError);
}

}  // namespace
}  // namespace finetune
