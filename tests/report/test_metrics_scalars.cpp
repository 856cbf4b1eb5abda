// metrics.jsonl fields -> TensorBoard tags, by HF's rewrite_logs rule
// (transformers/integrations/integration_utils.py).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "finetune/report/metrics_scalars.h"

namespace finetune {
namespace {

std::vector<std::pair<std::string, double>> pairs(const std::vector<ScalarValue>& scalars) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& s : scalars) out.emplace_back(s.tag, s.value);
  return out;
}

TEST(MetricsScalars, RewriteLogsRule) {
  // rewrite_logs({"loss": 0, "eval_loss": 0, "test_loss": 0, "train_runtime": 0, "evaluation": 0})
  EXPECT_EQ(tensorboard_tag("loss"), "train/loss");
  EXPECT_EQ(tensorboard_tag("eval_loss"), "eval/loss");
  EXPECT_EQ(tensorboard_tag("test_loss"), "test/loss");
  EXPECT_EQ(tensorboard_tag("train_runtime"), "train/train_runtime");
  EXPECT_EQ(tensorboard_tag("evaluation"), "train/evaluation");  // the prefix is "eval_", underscore included
}

TEST(MetricsScalars, EveryNumericFieldOfALogLine) {
  StepMetrics m;
  m.step = 7, m.epoch = 0.5, m.loss = 2.25, m.lr = 1e-4, m.grad_norm = 0.75, m.tokens = 1234, m.tokens_per_s = 99.5,
  m.elapsed_s = 3.5, m.rank_imbalance = 1.25;
  const std::vector<std::pair<std::string, double>> train = {
      {"train/loss", 2.25},          {"train/grad_norm", 0.75},         {"train/learning_rate", 1e-4},
      {"train/epoch", 0.5},          {"train/num_input_tokens_seen", 1234}, {"train/tokens_per_second", 99.5},
      {"train/elapsed_s", 3.5},      {"train/rank_imbalance", 1.25}};
  EXPECT_EQ(pairs(step_scalars(m)), train);
  m.eval_loss = 1.75;
  auto with_eval = train;
  with_eval.emplace_back("eval/loss", 1.75);
  EXPECT_EQ(pairs(step_scalars(m)), with_eval);
}

// A GPU run's log line also carries its allocator peak: a metrics.jsonl field and a train/ scalar,
// both absent off the GPU (std::nullopt), as in the lines above.
TEST(MetricsScalars, PeakMemoryOnlyWhenMeasured) {
  StepMetrics m;
  m.step = 3, m.loss = 2.5;
  EXPECT_FALSE(metrics_json(m).contains("peak_memory_gib"));
  m.peak_memory_gib = 16.25;
  EXPECT_EQ(metrics_json(m)["peak_memory_gib"].get<double>(), 16.25);
  const auto scalars = pairs(step_scalars(m));
  ASSERT_EQ(scalars.size(), 9u);
  EXPECT_EQ(scalars.back(), (std::pair<std::string, double>{"train/peak_memory_gib", 16.25}));
}

TEST(MetricsScalars, RunSummary) {
  RunSummaryMetrics summary;
  summary.train_loss = 2.5, summary.runtime_s = 10, summary.tokens_per_s = 400;
  const std::vector<std::pair<std::string, double>> expected = {
      {"train/train_loss", 2.5}, {"train/train_runtime", 10}, {"train/train_tokens_per_second", 400}};
  EXPECT_EQ(pairs(summary_scalars(summary)), expected);
  summary.eval_loss = 1.5;
  auto with_eval = expected;
  with_eval.emplace_back("eval/loss", 1.5);
  EXPECT_EQ(pairs(summary_scalars(summary)), with_eval);
}

}  // namespace
}  // namespace finetune
