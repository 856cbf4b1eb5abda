// The objective seam (train/objective.h): CausalLmObjective's loss is the plain cross-entropy over
// the shifted labels, its normaliser the trained tokens; row weights scale their rows.
#include <gtest/gtest.h>

#include "finetune/data/batch.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/loss.h"
#include "finetune/train/objective.h"
#include "trainer_test_model.h"

namespace finetune {
namespace {

ForwardOptions training() {
  ForwardOptions forward;
  forward.training = true;
  return forward;
}

// transformers' ForCausalLMLoss summed: cross-entropy of the upcast logits against the labels
// shifted by one, -100 ignored.
double plain_cross_entropy_sum(const CausalLM& model, const DeviceBatch& batch) {
  at::NoGradGuard no_grad;
  const auto hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, ForwardOptions{});
  const auto logits = model.lm_head(hidden).to(at::kFloat).reshape({-1, model.config().vocab_size});
  return at::cross_entropy_loss(logits, shift_labels(batch.labels).reshape(-1), std::nullopt, at::Reduction::Sum,
                                kIgnoreIndex)
      .item<double>();
}

TEST(CausalLmObjective, LossIsTheCrossEntropyOverShiftedLabels) {
  auto model = testing::tiny_lora_model();
  const auto samples = testing::tiny_samples(4);
  const HostBatch host = collate(samples, {0, 1, 2, 3}, 0);
  const auto batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const CausalLmObjective objective;
  EXPECT_EQ(objective.normaliser_share(host), static_cast<double>(host.trainable_tokens));
  int64_t trained = 0;
  for (const auto& sample : samples) trained += trainable_token_count(sample);
  EXPECT_EQ(host.trainable_tokens, trained);
  const double loss = objective.loss_sum(*model, micro_batch_inputs(batch), training()).item<double>();
  const double reference = plain_cross_entropy_sum(*model, batch);
  EXPECT_GT(reference, 0.0);
  EXPECT_NEAR(loss, reference, 1e-5 * reference);
}

TEST(CausalLmObjective, RowWeightsScaleTheirRows) {
  auto model = testing::tiny_lora_model();
  const HostBatch host = collate(testing::tiny_samples(2), {0, 1}, 0);
  const auto batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const CausalLmObjective objective;
  auto inputs = micro_batch_inputs(batch);
  const int64_t rows = inputs.targets.positions.size(0);
  const double plain = objective.loss_sum(*model, inputs, training()).item<double>();
  inputs.targets.weights = at::full({rows}, 2.0, at::kFloat);
  EXPECT_NEAR(objective.loss_sum(*model, inputs, training()).item<double>(), 2 * plain, 1e-5 * plain);
  inputs.targets.weights = at::zeros({rows}, at::kFloat);
  EXPECT_EQ(objective.loss_sum(*model, inputs, training()).item<double>(), 0.0);
}

}  // namespace
}  // namespace finetune
