// DpoObjective against TRL 1.16's DPOTrainer._compute_loss on the same tiny Llama, PEFT LoRA
// adapter and pairs (reference: adapters disabled), fp32: loss and every logged metric within
// 1e-5 relative (fixtures: tests/reference/make_preference_fixtures.py, objective/).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../reference/fixtures.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/dpo_objective.h"
#include "finetune/util/errors.h"
#include "preference_test_model.h"
#include "trainer_test_model.h"

namespace finetune {
namespace {

using testing::training_forward;

constexpr double kRelative = 1e-5;

using testing::preference_model_with_peft_adapter;
using testing::preference_pairs_batch;

double relative_difference(double actual, double expected) {
  return std::abs(actual - expected) / std::max(std::abs(expected), 1e-30);
}

TEST(DpoObjective, LossAndMetricsMatchTrlDpoTrainerOnAPeftModel) {
  auto model = preference_model_with_peft_adapter();
  const HostBatch host = preference_pairs_batch();
  const DeviceBatch batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const nlohmann::json cases = reference::load_json_fixture("preference", "objective/expected.json");
  double worst = 0;
  for (const auto& c : cases) {
    DpoLossConfig config;
    config.loss_type = dpo_loss_type_from_name(c["loss_type"].get<std::string>());
    config.beta = c["beta"].get<double>();
    const DpoObjective objective(config, *model);
    const PreferenceLoss loss = objective.evaluate(*model, micro_batch_inputs(batch), training_forward());
    const std::string where = c["loss_type"].get<std::string>();
    const double expected_loss = c["loss"].get<double>();
    EXPECT_LE(relative_difference(loss.loss.item<double>(), expected_loss), kRelative)
        << where << " loss " << loss.loss.item<double>() << " vs " << expected_loss;
    worst = std::max(worst, relative_difference(loss.loss.item<double>(), expected_loss));
    std::map<std::string, double> means;
    for (const auto& [name, value] : metric_means(loss)) means[name] = value;
    for (const auto& [name, value] : c["metrics"].items()) {
      ASSERT_EQ(means.count(name), 1u) << name;
      const double difference = relative_difference(means[name], value.get<double>());
      EXPECT_LE(difference, kRelative) << where << " " << name << " " << means[name] << " vs " << value;
      worst = std::max(worst, difference);
    }
    // The seam's view: loss_sum over the normaliser (pairs) is the same mean.
    const double pairs = objective.normaliser_share(host);
    EXPECT_EQ(pairs, static_cast<double>(host.rows / 2));
    const at::Tensor loss_sum = objective.loss_sum(*model, micro_batch_inputs(batch), training_forward());
    EXPECT_LE(relative_difference(loss_sum.item<double>() / pairs, expected_loss), kRelative) << where;
  }
  std::printf("[ parity   ] DpoObjective vs TRL DPOTrainer._compute_loss: %zu loss types, worst relative %.3g\n",
              cases.size(), worst);
}

TEST(DpoObjective, GradientReachesTheAdaptersAndTheReferenceKeepsThem) {
  auto model = preference_model_with_peft_adapter();
  const HostBatch host = preference_pairs_batch();
  const DeviceBatch batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const DpoObjective objective(DpoLossConfig{}, *model);
  const size_t adapters_before = lora_parameters(*model).size();
  const at::Tensor first = objective.loss_sum(*model, micro_batch_inputs(batch), training_forward());
  first.backward();
  const auto parameters = lora_parameters(*model);
  EXPECT_EQ(parameters.size(), adapters_before);  // every adapter is back after the reference forward
  double gradient_norm = 0;
  for (const auto& [name, tensor] : parameters) {
    ASSERT_TRUE(tensor.grad().defined()) << name;
    gradient_norm += tensor.grad().pow(2).sum().item<double>();
  }
  EXPECT_GT(gradient_norm, 0);
  const at::Tensor second = objective.loss_sum(*model, micro_batch_inputs(batch), training_forward());
  EXPECT_EQ(first.item<float>(), second.item<float>());  // the adapters came back unchanged
}

TEST(DpoObjective, RejectsAnOddRowCountAndAnotherModel) {
  auto model = preference_model_with_peft_adapter();
  auto other = preference_model_with_peft_adapter();
  const HostBatch host = preference_pairs_batch();
  const DeviceBatch batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const DpoObjective objective(DpoLossConfig{}, *model);
  EXPECT_THROW(objective.evaluate(*other, micro_batch_inputs(batch), training_forward()), Error);
  const std::vector<Sample> one = {{{5, 6, 7}, {kIgnoreIndex, 6, 7}}};
  const DeviceBatch odd = to_device(collate(one, {0}, 0), at::kCPU, BatchLayout::kPaddedRows);
  EXPECT_THROW(objective.evaluate(*model, micro_batch_inputs(odd), training_forward()), Error);
}

}  // namespace
}  // namespace finetune
