// The three batch layouts (right-padded rows, packed rows, one flattened row) give the same loss
// and the same LoRA gradients on the same samples: padding and packing never change training.
#include <gtest/gtest.h>

#include "trainer_test_model.h"
#include "finetune/data/batch.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/graph_batch.h"
#include "finetune/train/loss.h"

namespace finetune {
namespace {

// The trainer tests' tiny model (its defaults: seed 7, LoRA on q/v/down_proj, no dropout).
std::unique_ptr<CausalLM> random_model() { return testing::tiny_lora_model(); }

std::vector<Sample> samples() {
  return {{{5, 6, 7, 8, 9}, {-100, -100, 7, 8, 9}},
          {{10, 11, 12}, {10, 11, 12}},
          {{13, 14, 15, 16, 17, 18, 19}, {-100, 14, -100, 16, 17, 18, 19}},
          {{20, 21}, {20, 21}}};
}

struct LossAndGrads {
  double loss;
  std::vector<at::Tensor> grads;
};

LossAndGrads run(CausalLM& model, const HostBatch& host, BatchLayout layout) {
  for (auto& [name, tensor] : lora_parameters(model)) tensor.mutable_grad() = at::Tensor();
  const auto batch = to_device(host, at::kCPU, layout);
  ForwardOptions options;
  options.training = true;
  auto hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, options);
  auto loss = causal_lm_loss_sum(model, hidden, batch.target_positions, batch.target_ids);
  // The host-located targets select exactly what shifting the labels on the device selects.
  EXPECT_EQ(loss.item<double>(), causal_lm_loss_sum(model, hidden, batch.labels).item<double>());
  loss.backward();
  LossAndGrads out{loss.item<double>(), {}};
  for (auto& [name, tensor] : lora_parameters(model)) out.grads.push_back(tensor.grad().clone());
  return out;
}

void expect_same(const LossAndGrads& a, const LossAndGrads& b) {
  EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::abs(b.loss));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    const double rel = ((a.grads[i] - b.grads[i]).norm() / b.grads[i].norm()).item<double>();
    EXPECT_LE(rel, 1e-5) << "gradient " << i;
  }
}

TEST(BatchLayouts, PaddedPackedAndFlattenedGiveTheSameLossAndGradients) {
  auto model = random_model();
  const auto data = samples();
  const auto padded = run(*model, collate(data, {0, 1, 2, 3}, 0), BatchLayout::kPaddedRows);
  const auto packed = run(*model, collate_rows(data, {{0, 1}, {2, 3}}, 0), BatchLayout::kPaddedRows);
  // On the CPU the flat row's samples are kept apart by a block-diagonal mask (flash attention's
  // cumulative lengths on the GPU).
  const auto flattened = run(*model, collate(data, {0, 1, 2, 3}, 0), BatchLayout::kFlatRowMasked);
  EXPECT_GT(padded.loss, 0.0);
  expect_same(packed, padded);
  expect_same(flattened, padded);
}

TEST(BatchLayouts, PerSampleLossesAddUpToTheBatchLoss) {
  auto model = random_model();
  const auto data = samples();
  double separate = 0;
  for (int64_t i = 0; i < 4; ++i) separate += run(*model, collate(data, {i}, 0), BatchLayout::kPaddedRows).loss;
  EXPECT_NEAR(run(*model, collate_rows(data, {{0, 1, 2, 3}}, 0), BatchLayout::kPaddedRows).loss, separate,
              1e-5 * separate);
}

// Note [Graphed micro-steps]: the graph layout pads the row with a filler sample and the targets
// with weight-0 rows. On the CPU the filler is a block of its own in the block-diagonal mask (as
// it is a sequence of its own for flash attention on the GPU): loss and gradients are unchanged.
TEST(BatchLayouts, GraphLayoutWithFillerGivesTheSameLossAndGradients) {
  auto model = random_model();
  const HostBatch flat = flatten(collate(samples(), {0, 1, 2, 3}, 0));
  const auto unpadded = run(*model, flat, BatchLayout::kFlatRowMasked);

  const GraphBatch padded = graph_batch(flat, /*filler_token_id=*/3);
  ASSERT_GT(padded.shape.tokens, flat.seq_len);
  const auto in = graph_inputs(at::tensor(padded.values, at::TensorOptions().dtype(at::kLong)), padded.shape);
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < padded.shape.samples; ++i) {
    lengths.push_back(in.cu_seqlens[i + 1].item<int64_t>() - in.cu_seqlens[i].item<int64_t>());
  }
  const auto mask = build_attention_mask({lengths}, padded.shape.tokens, at::kCPU);
  for (auto& [name, tensor] : lora_parameters(*model)) tensor.mutable_grad() = at::Tensor();
  ForwardOptions options;
  options.training = true;
  auto hidden = model->forward_hidden(in.input_ids, in.position_ids, mask, options);
  auto loss = causal_lm_loss_sum(*model, hidden, in.target_positions, in.target_ids, in.target_weights);
  loss.backward();
  LossAndGrads graph_layout{loss.item<double>(), {}};
  for (auto& [name, tensor] : lora_parameters(*model)) graph_layout.grads.push_back(tensor.grad().clone());
  EXPECT_GT(unpadded.loss, 0.0);
  expect_same(graph_layout, unpadded);
}

}  // namespace
}  // namespace finetune
