// The objective seam (train/objective.h): CausalLmObjective's loss is the plain cross-entropy over
// the shifted labels, its normaliser the trained tokens; row weights scale their rows; on a MoE
// model with output_router_logits the router term enters the loss (training and evaluation) and is
// the objective's metric aux_loss.
#include <gtest/gtest.h>

#include "finetune/data/batch.h"
#include "finetune/io/model_config.h"
#include "finetune/model/moe_block.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/loss.h"
#include "finetune/train/objective.h"
#include "trainer_test_model.h"

namespace finetune {
namespace {

using testing::training_forward;

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
  const CausalLmObjective objective(model->config());
  EXPECT_EQ(objective.normaliser_share(host), static_cast<double>(host.trainable_tokens));
  int64_t trained = 0;
  for (const auto& sample : samples) trained += trainable_token_count(sample);
  EXPECT_EQ(host.trainable_tokens, trained);
  const double loss = objective.loss_sum(*model, micro_batch_inputs(batch), training_forward()).item<double>();
  const double reference = plain_cross_entropy_sum(*model, batch);
  EXPECT_GT(reference, 0.0);
  EXPECT_NEAR(loss, reference, 1e-5 * reference);
}

TEST(CausalLmObjective, RowWeightsScaleTheirRows) {
  auto model = testing::tiny_lora_model();
  const HostBatch host = collate(testing::tiny_samples(2), {0, 1}, 0);
  const auto batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const CausalLmObjective objective(model->config());
  auto inputs = micro_batch_inputs(batch);
  const int64_t rows = inputs.targets.positions.size(0);
  const double plain = objective.loss_sum(*model, inputs, training_forward()).item<double>();
  inputs.targets.weights = at::full({rows}, 2.0, at::kFloat);
  EXPECT_NEAR(objective.loss_sum(*model, inputs, training_forward()).item<double>(), 2 * plain, 1e-5 * plain);
  inputs.targets.weights = at::zeros({rows}, at::kFloat);
  EXPECT_EQ(objective.loss_sum(*model, inputs, training_forward()).item<double>(), 0.0);
}

// A tiny random Qwen3-MoE (8 experts, top-2) with the router loss on: the tiny Llama's shapes.
std::unique_ptr<CausalLM> tiny_moe_model(double router_aux_loss_coef) {
  const nlohmann::json json = {
      {"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"vocab_size", 64},
      {"hidden_size", 32}, {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2}, {"head_dim", 8}, {"moe_intermediate_size", 16}, {"num_experts", 8},
      {"num_experts_per_tok", 2}, {"output_router_logits", true}, {"router_aux_loss_coef", router_aux_loss_coef}};
  auto model = std::make_unique<CausalLM>(model_config_from_json(json, "config.json"), at::kFloat, at::kCPU);
  at::NoGradGuard no_grad;
  at::manual_seed(3);
  for (auto& [name, parameter] : model->named_parameters()) {
    if (name.find("norm") != std::string::npos) {
      parameter.fill_(1.0);
    } else {
      parameter.normal_(0.0, 0.2);
    }
  }
  return model;
}

TEST(CausalLmObjective, RouterLossIsInTheLossAndItsAuxLossMetric) {
  constexpr double kCoef = 0.05;
  const auto model = tiny_moe_model(kCoef);
  const CausalLmObjective objective(model->config());
  EXPECT_EQ(objective.metric_names(), std::vector<std::string>{"aux_loss"});
  EXPECT_TRUE(objective.graph_capturable());  // the model decides (CausalLM::cuda_graph_safe)
  const HostBatch host = collate(testing::tiny_samples(4), {0, 1, 2, 3}, 0);  // rows of different lengths
  const auto batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  // transformers' load_balancing_loss_func over the real tokens (model/moe_block.h, its own test).
  std::vector<at::Tensor> router_logits;
  ForwardOptions with_router;
  with_router.router_logits = &router_logits;
  double aux = 0;
  {
    at::NoGradGuard no_grad;
    model->forward_hidden(batch.input_ids, batch.position_ids, batch.mask, with_router);
    const auto& moe = *model->config().moe;
    aux = load_balancing_loss(router_logits, moe.num_experts, moe.num_experts_per_tok, batch.real_token_mask)
              .item<double>();
  }
  EXPECT_GT(aux, 0.0);
  const auto trained = static_cast<double>(host.trainable_tokens);
  const double expected_loss = plain_cross_entropy_sum(*model, batch) + kCoef * aux * trained;
  ForwardOptions evaluation;
  for (const ForwardOptions& forward : {training_forward(), evaluation}) {  // transformers adds it in eval too
    const auto out = objective.loss_and_metric_sums(*model, micro_batch_inputs(batch), forward);
    ASSERT_TRUE(out.metric_sums.defined());
    ASSERT_EQ(out.metric_sums.numel(), 1);
    EXPECT_NEAR(out.metric_sums[0].item<double>(), aux * trained, 1e-6 * aux * trained);
    EXPECT_NEAR(out.loss_sum.item<double>(), expected_loss, 1e-5 * expected_loss);
  }
}

TEST(CausalLmObjective, RouterLossCountsTheTrainedRowsByTheirWeights) {
  constexpr double kCoef = 0.05;
  const auto model = tiny_moe_model(kCoef);
  // A trained tensor, so the loss takes its training path (the one that honours row weights).
  for (auto& [name, parameter] : model->named_parameters()) {
    if (name == "model.layers.0.self_attn.q_proj.weight") parameter.requires_grad_(true);
  }
  const CausalLmObjective objective(model->config());
  const HostBatch host = collate(testing::tiny_samples(4), {0, 1, 2, 3}, 0);
  const auto batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const auto plain = objective.loss_and_metric_sums(*model, micro_batch_inputs(batch), training_forward());
  const int64_t rows = batch.target_positions.size(0);
  // Weight 1 everywhere: the count of rows, as without weights.
  MicroBatchInputs inputs = micro_batch_inputs(batch);
  inputs.targets.weights = at::ones({rows}, at::kFloat);
  const auto ones = objective.loss_and_metric_sums(*model, inputs, training_forward());
  EXPECT_NEAR(ones.metric_sums[0].item<double>(), plain.metric_sums[0].item<double>(),
              1e-6 * plain.metric_sums[0].item<double>());
  EXPECT_NEAR(ones.loss_sum.item<double>(), plain.loss_sum.item<double>(), 1e-5 * plain.loss_sum.item<double>());
  // A weight-0 row (a graph's filler row) is not counted.
  inputs.targets.weights[rows - 1] = 0.0;
  const auto filler = objective.loss_and_metric_sums(*model, inputs, training_forward());
  const double per_row = plain.metric_sums[0].item<double>() / static_cast<double>(rows);
  EXPECT_NEAR(filler.metric_sums[0].item<double>(), per_row * static_cast<double>(rows - 1), 1e-6 * per_row * rows);
}

TEST(CausalLmObjective, NoMetricsWithoutTheRouterLoss) {
  const auto dense = testing::tiny_lora_model();
  const CausalLmObjective objective(dense->config());
  EXPECT_TRUE(objective.metric_names().empty());
  EXPECT_TRUE(objective.graph_capturable());
  const auto batch = to_device(collate(testing::tiny_samples(2), {0, 1}, 0), at::kCPU, BatchLayout::kPaddedRows);
  const auto out = objective.loss_and_metric_sums(*dense, micro_batch_inputs(batch), training_forward());
  EXPECT_FALSE(out.metric_sums.defined());
  // A coefficient of 0 adds nothing, as transformers' loss + 0 * aux_loss: no router loss to report.
  EXPECT_TRUE(CausalLmObjective(tiny_moe_model(0.0)->config()).metric_names().empty());
}

}  // namespace
}  // namespace finetune
