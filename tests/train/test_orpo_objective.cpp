// OrpoObjective against TRL 1.16's ORPOTrainer.get_batch_loss_metrics (its own concatenated
// forward) on the same tiny Llama, PEFT LoRA adapter and pairs, fp32: loss and every logged
// metric within 1e-5 relative (fixtures: tests/reference/make_preference_fixtures.py, objective/).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../reference/fixtures.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/orpo_objective.h"
#include "finetune/train/sequence_log_probs.h"
#include "preference_test_model.h"
#include "trainer_test_model.h"

namespace finetune {
namespace {

using testing::training_forward;

constexpr double kRelative = 1e-5;

double relative_difference(double actual, double expected) {
  return std::abs(actual - expected) / std::max(std::abs(expected), 1e-30);
}

TEST(OrpoObjective, LossAndMetricsMatchTrlOrpoTrainerOnAPeftModel) {
  auto model = testing::preference_model_with_peft_adapter();
  const HostBatch host = testing::preference_pairs_batch();
  const DeviceBatch batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const nlohmann::json cases = reference::load_json_fixture("preference", "objective/orpo_expected.json");
  ASSERT_FALSE(cases.empty());
  double worst = 0;
  for (const auto& c : cases) {
    const OrpoObjective objective(c["beta"].get<double>());
    const PreferenceLoss loss = objective.evaluate(*model, micro_batch_inputs(batch), training_forward());
    const double expected_loss = c["loss"].get<double>();
    const double loss_difference = relative_difference(loss.loss.item<double>(), expected_loss);
    EXPECT_LE(loss_difference, kRelative) << "loss " << loss.loss.item<double>() << " vs " << expected_loss;
    worst = std::max(worst, loss_difference);
    std::map<std::string, double> means;
    for (const auto& [name, value] : metric_means(loss)) means[name] = value;
    ASSERT_EQ(means.size(), c["metrics"].size());
    for (const auto& [name, value] : c["metrics"].items()) {
      ASSERT_EQ(means.count(name), 1u) << name;
      const double difference = relative_difference(means[name], value.get<double>());
      EXPECT_LE(difference, kRelative) << name << " " << means[name] << " vs " << value;
      worst = std::max(worst, difference);
    }
    const double pairs = objective.normaliser_share(host);
    EXPECT_EQ(pairs, static_cast<double>(host.rows / 2));
    const at::Tensor loss_sum = objective.loss_sum(*model, micro_batch_inputs(batch), training_forward());
    EXPECT_LE(relative_difference(loss_sum.item<double>() / pairs, expected_loss), kRelative);
  }
  std::printf("[ parity   ] OrpoObjective vs TRL ORPOTrainer.get_batch_loss_metrics: %zu cases, worst relative %.3g\n",
              cases.size(), worst);
}

TEST(OrpoObjective, NllTargetsAreEveryRealNextTokenOfTheChosenRows) {
  // Two chosen rows (lengths 3 and 2, padded to 4) and two rejected rows: the NLL reads the chosen
  // rows' next tokens wherever one is real, prompt or not.
  const std::vector<Sample> rows = {{{5, 6, 7}, {kIgnoreIndex, kIgnoreIndex, 7}},
                                    {{8, 9}, {kIgnoreIndex, 9}},
                                    {{10, 11, 12, 13}, {kIgnoreIndex, 11, 12, 13}},
                                    {{14, 15}, {kIgnoreIndex, 15}}};
  const DeviceBatch batch = to_device(collate(rows, {0, 1, 2, 3}, 0), at::kCPU, BatchLayout::kPaddedRows);
  const TokenTargets targets = every_next_token_targets(batch.input_ids, batch.position_ids, 2);
  const int64_t seq_len = batch.input_ids.size(1);
  EXPECT_TRUE(at::equal(targets.positions, at::tensor(std::vector<int64_t>{0, 1, seq_len})));
  EXPECT_TRUE(at::equal(targets.ids, at::tensor(std::vector<int64_t>{6, 7, 9})));
}

TEST(OrpoObjective, GradientReachesTheAdapters) {
  auto model = testing::preference_model_with_peft_adapter();
  const DeviceBatch batch = to_device(testing::preference_pairs_batch(), at::kCPU, BatchLayout::kPaddedRows);
  OrpoObjective(0.1).loss_sum(*model, micro_batch_inputs(batch), training_forward()).backward();
  double gradient_norm = 0;
  for (const auto& [name, tensor] : lora_parameters(*model)) {
    ASSERT_TRUE(tensor.grad().defined()) << name;
    gradient_norm += tensor.grad().pow(2).sum().item<double>();
  }
  EXPECT_GT(gradient_norm, 0);
}

}  // namespace
}  // namespace finetune
