// Learning-rate schedules against transformers: lr_multiplier at every step 0..total equals the
// LambdaLR multiplier of get_scheduler(type, num_warmup_steps, num_training_steps,
// scheduler_specific_kwargs) for every offered type, with the optimizer's lr and the kwargs
// lr_schedule_from reads (--lr_scheduler_kwargs), and
// resolve_warmup_steps equals TrainingArguments.get_warmup_steps. Both exactly: the C++ evaluates
// transformers' double expressions in the same order (cos is the same C library function), and
// warmup resolution is integer arithmetic after one ceil. Fixtures: make_train_fixtures.py.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "../reference/fixtures.h"
#include "../test_support.h"
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
    const double lr = s.contains("lr") ? s.at("lr").get<double>() : 1.0;
    const auto kwargs = s.contains("kwargs") ? s.at("kwargs") : nlohmann::json();
    const LrSchedule schedule = lr_schedule_from(s.at("type"), s.at("warmup"), s.at("total"), lr, kwargs);
    types.insert(schedule.type);
    no_warmup |= schedule.warmup_steps == 0;
    warmup_is_total |= schedule.warmup_steps == schedule.total_steps;
    const auto expected = s.at("multipliers").get<std::vector<double>>();
    ASSERT_EQ(expected.size(), static_cast<size_t>(schedule.total_steps + 1));
    for (int64_t step = 0; step <= schedule.total_steps; ++step) {
      const double actual = lr_multiplier(schedule, step);
      EXPECT_EQ(actual, expected[step]) << schedule.type << " " << kwargs.dump() << " lr " << lr << " warmup "
                                        << schedule.warmup_steps << " total " << schedule.total_steps << " step " << step;
      worst = std::max(worst, std::abs(actual - expected[step]));
    }
  }
  EXPECT_EQ(types, std::set<std::string>(lr_scheduler_types().begin(), lr_scheduler_types().end()));
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
  schedule.type = "reduce_lr_on_plateau";
  EXPECT_THROW(lr_multiplier(schedule, 0), UsageError);
  EXPECT_THROW(lr_schedule_from("greedy", 0, 10, 1e-3, nullptr), UsageError);
}

// get_scheduler's refusals (a TypeError for a keyword the function does not take, its ValueErrors),
// as UsageErrors naming --lr_scheduler_kwargs and the key; and keywords transformers would ignore
// (constant's) refused rather than ignored.
TEST(LrSchedule, KwargsTheTypeDoesNotTakeAreRefusedNamingTheKey) {
  auto refusal = [](const std::string& type, const std::string& kwargs, double lr = 1e-3) {
    return testing::error_message([&] { lr_schedule_from(type, 2, 10, lr, parse_lr_scheduler_kwargs(kwargs)); });
  };
  testing::expect_contains(refusal("linear", R"({"num_cycles": 2})"),
                           {"--lr_scheduler_kwargs \"num_cycles\"", "linear takes no keyword arguments"});
  testing::expect_contains(refusal("constant", R"({"power": 2})"), {"\"power\"", "constant takes no keyword"});
  testing::expect_contains(refusal("cosine_with_restarts", R"({"power": 2})"), {"\"power\"", "only num_cycles"});
  testing::expect_contains(refusal("polynomial", R"({"lr_end": 0.01})"), {"lr_end", "smaller than --learning_rate"});
  testing::expect_contains(refusal("polynomial", R"({"power": "two"})"), {"\"power\"", "expected a number"});
  testing::expect_contains(refusal("cosine_with_min_lr", ""), {"min_lr or min_lr_rate"});
  testing::expect_contains(refusal("cosine_with_min_lr", R"({"min_lr": 1e-5, "min_lr_rate": 0.1})"),
                           {"one of min_lr and min_lr_rate"});
  testing::expect_contains(refusal("warmup_stable_decay", "{}"), {"needs num_decay_steps"});
  testing::expect_contains(refusal("warmup_stable_decay", R"({"num_decay_steps": 2, "decay_type": "exp"})"),
                           {"\"decay_type\"", "linear, cosine, 1-sqrt"});
  testing::expect_contains(refusal("inverse_sqrt", R"({"timescale": 1.5})"), {"\"timescale\"", "integer"});
  testing::expect_contains(refusal("cosine", "[1, 2]"), {"--lr_scheduler_kwargs must be a JSON object"});
  testing::expect_contains(refusal("cosine", "{num_cycles: 2}"), {"--lr_scheduler_kwargs", "invalid JSON"});
  EXPECT_NO_THROW(lr_schedule_from("cosine", 2, 10, 1e-3, parse_lr_scheduler_kwargs("")));
}

}  // namespace
}  // namespace finetune
