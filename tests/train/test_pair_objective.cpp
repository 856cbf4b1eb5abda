// The preference objectives' shared part (PairObjective): the same loss and metrics whether a
// micro-batch's pairs come as padded rows or as one padding-free row; metric sums are TRL's
// per-micro-batch values x pairs, in metric_names' order; a frozen reference adapter and
// precomputed reference log-probs give the numbers of the reference forward they replace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "finetune/checkpoint/adapter_io.h"
#include "finetune/commands/preference_setup.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/lora/lora_adapter.h"
#include "finetune/model/attention_mask.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/dpo_objective.h"
#include "finetune/train/graph_batch.h"
#include "finetune/train/orpo_objective.h"
#include "finetune/train/reference_adapters.h"
#include "preference_test_model.h"
#include "trainer_test_model.h"

namespace finetune {
namespace {

using testing::training_forward;

using testing::preference_model_with_peft_adapter;
using testing::preference_objective_dir;
using testing::preference_pairs_batch;

// The pairs of a [chosen..., rejected...] batch as interleaved rows (chosen, rejected of pair 0,
// then pair 1, ...), as precompute_reference takes them (data/preference_dataset.h).
std::vector<Sample> interleaved_pair_rows_of(const HostBatch& host) {
  std::vector<Sample> interleaved;
  const auto pairs = host.rows / 2;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    for (int64_t member = 0; member < 2; ++member) {
      const int64_t row = member * pairs + pair;
      Sample sample;
      for (int64_t t = 0; t < host.sample_lengths[static_cast<size_t>(row)][0]; ++t) {
        sample.input_ids.push_back(static_cast<int32_t>(host.input_ids[static_cast<size_t>(row * host.seq_len + t)]));
        sample.labels.push_back(static_cast<int32_t>(host.labels[static_cast<size_t>(row * host.seq_len + t)]));
      }
      interleaved.push_back(sample);
    }
  }
  return interleaved;
}

void expect_close(const at::Tensor& actual, const at::Tensor& expected, double relative, const std::string& what) {
  const double scale = expected.abs().max().item<double>();
  EXPECT_LE((actual - expected).abs().max().item<double>(), relative * std::max(scale, 1e-30)) << what;
}

void expect_same_loss_and_metrics(const PairObjective& objective, const CausalLM& model, const DeviceBatch& a,
                                  const DeviceBatch& b, double relative) {
  const LossAndMetrics first = objective.loss_and_metric_sums(model, micro_batch_inputs(a), training_forward());
  const LossAndMetrics second = objective.loss_and_metric_sums(model, micro_batch_inputs(b), training_forward());
  expect_close(second.loss_sum, first.loss_sum, relative, objective.name() + " loss");
  expect_close(second.metric_sums, first.metric_sums, relative, objective.name() + " metrics");
}

TEST(PairObjective, PaddedRowsAndOnePaddingFreeRowGiveTheSameLossAndMetrics) {
  auto model = preference_model_with_peft_adapter();
  const HostBatch host = preference_pairs_batch();
  const DeviceBatch padded = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const DeviceBatch flat = to_device(host, at::kCPU, BatchLayout::kFlatRowMasked);
  ASSERT_EQ(flat.input_ids.size(0), 1);
  expect_same_loss_and_metrics(DpoObjective(DpoLossConfig{}, *model), *model, padded, flat, 1e-5);
  DpoLossConfig ipo;
  ipo.loss_type = DpoLossType::Ipo;
  expect_same_loss_and_metrics(DpoObjective(ipo, *model), *model, padded, flat, 1e-5);
  expect_same_loss_and_metrics(OrpoObjective(0.1), *model, padded, flat, 1e-5);
}

TEST(PairObjective, MetricSumsAreTrlsMicroBatchValuesTimesPairs) {
  auto model = preference_model_with_peft_adapter();
  const HostBatch host = preference_pairs_batch();
  const DeviceBatch batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  const double pairs = static_cast<double>(host.rows / 2);
  const OrpoObjective orpo(0.25);
  const DpoObjective dpo(DpoLossConfig{}, *model);
  for (const PairObjective* objective : std::vector<const PairObjective*>{&orpo, &dpo}) {
    const PreferenceLoss loss = objective->evaluate(*model, micro_batch_inputs(batch), training_forward());
    const LossAndMetrics sums = objective->loss_and_metric_sums(*model, micro_batch_inputs(batch), training_forward());
    EXPECT_NEAR(sums.loss_sum.item<double>(), loss.loss.item<double>() * pairs, 1e-5);
    std::map<std::string, double> means;
    for (const auto& [name, value] : metric_means(loss)) means[name] = value;
    const auto names = objective->metric_names();
    ASSERT_EQ(sums.metric_sums.numel(), static_cast<int64_t>(names.size()));
    EXPECT_EQ(names.size(), means.size());
    for (size_t m = 0; m < names.size(); ++m) {
      ASSERT_EQ(means.count(names[m]), 1u) << names[m];
      EXPECT_NEAR(sums.metric_sums[static_cast<int64_t>(m)].item<double>() / pairs, means[names[m]],
                  1e-5 * std::max(1.0, std::abs(means[names[m]])))
          << objective->name() << " " << names[m];
    }
  }
}

// A frozen copy of the model's own adapter as the reference (commands/preference_setup.h): at the
// start the policy is the reference, so every reward is 0 and the sigmoid loss is log 2 (TRL's
// "ref" adapter of a PeftModel). Precomputed reference log-probs equal the forward's.
TEST(PairObjective, AFrozenCopyOfTheAdapterIsTheReferenceAndPrecomputedValuesMatchIt) {
  auto model = preference_model_with_peft_adapter();
  const HostBatch host = preference_pairs_batch();
  const DeviceBatch batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
  ReferenceAdapters reference = frozen_adapter_copy(*model, read_adapter_config(preference_objective_dir("adapter")),
                                                    preference_objective_dir("adapter"));
  DpoObjective objective(DpoLossConfig{}, *model, reference);
  const MicroBatchInputs inputs = micro_batch_inputs(batch);
  const PreferenceLoss loss = objective.evaluate(*model, inputs, training_forward());
  for (const auto& [name, value] : loss.metrics) {
    if (name.rfind("rewards/", 0) == 0 && name != "rewards/accuracies") {
      EXPECT_EQ(value.abs().max().item<float>(), 0.0f) << name;
    }
  }
  EXPECT_NEAR(loss.loss.item<double>(), std::log(2.0), 1e-6);
  for (const auto& [name, tensor] : lora_parameters(*model)) EXPECT_TRUE(tensor.requires_grad()) << name;  // the policy's

  // Precomputed: the pairs' values in the batch order, then looked up by pair index.
  const PairValues forward = objective.reference_log_probs(inputs, pair_sequences(inputs, "DPO"));
  const auto pairs = host.rows / 2;
  objective.precompute_reference(interleaved_pair_rows_of(host), pairs, 0, BatchLayout::kPaddedRows);
  MicroBatchInputs indexed = inputs;
  for (int64_t pair = 0; pair < pairs; ++pair) indexed.group_ids.push_back(pair);
  const PairValues looked_up = objective.reference_log_probs(indexed, pair_sequences(inputs, "DPO"));
  EXPECT_TRUE(at::equal(looked_up.chosen, forward.chosen));
  EXPECT_TRUE(at::equal(looked_up.rejected, forward.rejected));
}

// --lora_operand_cache false reaches the reference's copy as it does the trained adapters.
TEST(PairObjective, TheFrozenCopyTakesTheOperandCacheSetting) {
  auto model = preference_model_with_peft_adapter();
  for (const bool cache : {true, false}) {
    const ReferenceAdapters reference = frozen_adapter_copy(
        *model, read_adapter_config(preference_objective_dir("adapter")), preference_objective_dir("adapter"), cache);
    int64_t lora_adapters = 0;
    for (const LinearAdapter* adapter : reference.adapters()) {
      const auto* lora = dynamic_cast<const LoraAdapter*>(adapter);
      if (lora == nullptr) continue;
      EXPECT_EQ(lora->cache_operands, cache);
      ++lora_adapters;
    }
    EXPECT_GT(lora_adapters, 0);
  }
}

// The micro-batch a CUDA graph replays (train/graph_batch.h: a filler sample, weight-0 targets,
// pair slots), here on the CPU with the filler sample kept apart by a block-diagonal mask instead
// of cu_seqlens.
MicroBatchInputs graph_layout_on_cpu(const HostBatch& host, const GraphSections& sections) {
  HostBatch flat = flatten(host);
  flat.group_ids = host.group_ids;
  const GraphBatch padded = graph_batch(flat, /*filler_token_id=*/0, sections);
  const at::Tensor buffer = at::tensor(padded.values, at::TensorOptions().dtype(at::kLong));
  MicroBatchInputs inputs = graph_micro_batch(graph_inputs(buffer, padded.shape), padded.shape);
  std::vector<int64_t> lengths = flat.sample_lengths[0];
  lengths.push_back(padded.shape.tokens - flat.seq_len);  // the filler sample
  inputs.mask = build_attention_mask({lengths}, padded.shape.tokens, at::kCPU);
  return inputs;
}

struct StepOutcome {
  at::Tensor loss_sum, metric_sums, gradient;  // gradient: every LoRA tensor's, flattened
};

StepOutcome loss_metrics_and_gradient(const PairObjective& objective, CausalLM& model, const MicroBatchInputs& inputs) {
  const auto parameters = lora_parameters(model);
  for (const auto& [name, tensor] : parameters) tensor.mutable_grad() = at::Tensor();
  const LossAndMetrics out = objective.loss_and_metric_sums(model, inputs, training_forward());
  out.loss_sum.backward();
  std::vector<at::Tensor> gradients;
  for (const auto& [name, tensor] : parameters) gradients.push_back(tensor.grad().reshape({-1}).clone());
  return {out.loss_sum.detach(), out.metric_sums, at::cat(gradients)};
}

double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  const double scale = std::max(expected.abs().max().item<double>(), 1e-30);
  return (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>() / scale;
}

// Note [Filler pairs]: the graph's layout (3 pairs in 4 slots: a filler pair) gives the loss, every
// metric and the gradient of the eager padding-free row, for each DPO loss type, with
// precomputed reference log-probs, and for ORPO. Both run the same fp32 expressions; they differ
// only in the GEMMs' row counts (filler tokens and targets) and in masked sums that add zeros, so
// to fp32 rounding: measured 5.2e-7 relative at worst (the bound leaves a factor of about 4).
TEST(PairObjective, TheGraphLayoutWithFillerPairsGivesTheEagerLossMetricsAndGradient) {
  auto model = preference_model_with_peft_adapter();
  HostBatch host = preference_pairs_batch();
  const int64_t pairs = host.rows / 2;
  for (int64_t pair = 0; pair < pairs; ++pair) host.group_ids.push_back(pair);
  const DeviceBatch eager = to_device(host, at::kCPU, BatchLayout::kFlatRowMasked);

  std::vector<std::pair<std::string, std::unique_ptr<PairObjective>>> objectives;
  for (const auto& [type_name, type] : dpo_loss_types()) {
    DpoLossConfig config;
    config.loss_type = type;
    config.label_smoothing = type == DpoLossType::Robust ? 0.1 : 0.0;
    objectives.emplace_back("dpo " + type_name, std::make_unique<DpoObjective>(config, *model));
  }
  auto precomputed = std::make_unique<DpoObjective>(DpoLossConfig{}, *model);
  precomputed->precompute_reference(interleaved_pair_rows_of(host), pairs, 0, BatchLayout::kPaddedRows);
  objectives.emplace_back("dpo precomputed", std::move(precomputed));
  objectives.emplace_back("orpo", std::make_unique<OrpoObjective>(0.1));

  constexpr double kBound = 2e-6;
  double worst = 0;
  for (const auto& [what, objective] : objectives) {
    const StepOutcome expected = loss_metrics_and_gradient(*objective, *model, micro_batch_inputs(eager));
    const MicroBatchInputs graphed = graph_layout_on_cpu(host, objective->graph_sections());
    ASSERT_GT(graphed.pairs.slots, pairs);  // 3 pairs in 4 slots: a filler pair
    const StepOutcome actual = loss_metrics_and_gradient(*objective, *model, graphed);
    const double errors[] = {relative_error(actual.loss_sum, expected.loss_sum),
                             relative_error(actual.gradient, expected.gradient)};
    EXPECT_LE(errors[0], kBound) << what << " loss " << actual.loss_sum.item<double>() << " vs "
                                 << expected.loss_sum.item<double>();
    EXPECT_LE(errors[1], kBound) << what << " gradient";
    worst = std::max({worst, errors[0], errors[1]});
    ASSERT_EQ(actual.metric_sums.numel(), expected.metric_sums.numel());
    for (int64_t m = 0; m < expected.metric_sums.numel(); ++m) {
      const double error = relative_error(actual.metric_sums[m], expected.metric_sums[m]);
      EXPECT_LE(error, kBound) << what << " " << objective->metric_names()[static_cast<size_t>(m)] << " "
                               << actual.metric_sums[m].item<double>() << " vs " << expected.metric_sums[m].item<double>();
      worst = std::max(worst, error);
    }
  }
  std::printf("[ graphs   ] graph layout vs eager padding-free row: worst relative %.3g\n", worst);
}

}  // namespace
}  // namespace finetune
