// The fixed-shape layout that CUDA graphs of micro-steps replay (train/graph_batch.h).
#include <gtest/gtest.h>

#include "finetune/data/batch.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/graph_batch.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

TEST(GraphBucket, MultiplesOf64ThenEighthsOfThePowerOfTwo) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {{0, 64},      {1, 64},      {64, 64},     {65, 128},
                                                          {200, 256},   {1023, 1024}, {1024, 1024}, {1025, 1152},
                                                          {2047, 2048}, {2049, 2304}, {4095, 4096}, {4097, 4608}};
  for (const auto& [count, bucket] : cases) EXPECT_EQ(graph_bucket(count), bucket) << count;
}

std::vector<Sample> samples() {
  return {{{5, 6, 7, 8, 9}, {-100, -100, 7, 8, 9}}, {{10, 11, 12}, {10, 11, 12}}, {{20, 21}, {-100, -100}}};
}

TEST(GraphBatch, PadsWithOneFillerSampleAndWeightZeroTargets) {
  const HostBatch flat = flatten(collate(samples(), {0, 1, 2}, 0));
  const GraphBatch padded = graph_batch(flat, /*filler_token_id=*/3);
  EXPECT_EQ(padded.shape, (GraphShape{64, 64, 8}));
  EXPECT_EQ(padded.trainable_tokens, flat.trainable_tokens);
  EXPECT_EQ(padded.real_tokens, 10);
  ASSERT_EQ(padded.values.size(), size_t{2 * 64 + 3 * 64 + 9});

  const auto in = graph_inputs(at::tensor(padded.values, at::TensorOptions().dtype(at::kLong)), padded.shape);
  const std::vector<int64_t> ids = {5, 6, 7, 8, 9, 10, 11, 12, 20, 21};
  const std::vector<int64_t> positions = {0, 1, 2, 3, 4, 0, 1, 2, 0, 1};
  for (int64_t t = 0; t < 64; ++t) {
    EXPECT_EQ(in.input_ids[0][t].item<int64_t>(), t < 10 ? ids[t] : 3) << t;
    EXPECT_EQ(in.position_ids[0][t].item<int64_t>(), t < 10 ? positions[t] : t - 10) << t;
  }
  // The real targets are exactly the ones the eager layout trains on, in its order.
  const DeviceBatch eager = to_device(flat, at::kCPU, BatchLayout::kPaddedRows);
  const int64_t real = eager.target_positions.size(0);
  ASSERT_EQ(real, flat.trainable_tokens);
  EXPECT_TRUE(in.target_positions.narrow(0, 0, real).equal(eager.target_positions));
  EXPECT_TRUE(in.target_ids.narrow(0, 0, real).equal(eager.target_ids));
  EXPECT_TRUE(in.target_weights.narrow(0, 0, real).equal(at::ones({real})));
  EXPECT_TRUE(in.target_weights.narrow(0, real, 64 - real).equal(at::zeros({64 - real})));
  EXPECT_TRUE(in.target_positions.narrow(0, real, 64 - real).eq(63).all().item<bool>());
  EXPECT_TRUE(in.cu_seqlens.equal(at::tensor({0, 5, 8, 10, 64, 64, 64, 64, 64}, at::TensorOptions().dtype(at::kInt))));
}

TEST(GraphBatch, ShapeOfAnyLayoutIsTheShapeOfItsFlattenedBatch) {
  const auto data = samples();
  for (const HostBatch& batch : {collate(data, {0, 1, 2}, 0), collate_rows(data, {{0, 1}, {2}}, 0)}) {
    EXPECT_EQ(graph_shape(batch), graph_batch(flatten(batch), 0).shape);
  }
  EXPECT_EQ(graph_shape(collate(data, {0, 1, 2}, 0)), (GraphShape{64, 64, 8}));
}

TEST(GraphBatch, AFullBucketStillGetsAFillerToken) {
  std::vector<Sample> one = {{std::vector<int32_t>(64, 9), std::vector<int32_t>(64, 9)}};
  const GraphBatch padded = graph_batch(flatten(collate(one, {0}, 0)), 0);
  EXPECT_EQ(padded.shape, (GraphShape{128, 64, 8}));
}

TEST(GraphSampleBucket, PowersOfTwoFromEight) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {{1, 8}, {8, 8}, {9, 16}, {16, 16}, {17, 32}, {100, 128}};
  for (const auto& [count, bucket] : cases) EXPECT_EQ(graph_sample_bucket(count), bucket) << count;
}

TEST(GraphBatch, MicroBatchesOfAFewSamplesMoreOrLessShareAShape) {
  std::vector<Sample> rows;
  for (int i = 0; i < 6; ++i) rows.push_back({std::vector<int32_t>(10, 4), std::vector<int32_t>(10, 4)});
  const GraphShape six = graph_shape(collate(rows, {0, 1, 2, 3, 4, 5}, 0));
  rows.resize(3);
  rows.push_back({std::vector<int32_t>(30, 4), std::vector<int32_t>(30, 4)});
  EXPECT_EQ(graph_shape(collate(rows, {0, 1, 2, 3}, 0)), six);
}

// Ranks pad to the largest counterpart of their micro-batch (HostBatch::step_peak_*), so they replay
// the same shape; the padding is filler tokens, weight-0 targets and empty samples as before.
TEST(GraphBatch, PadsToTheStepPeaksOfTheOtherRanks) {
  HostBatch batch = collate(samples(), {0, 1, 2}, 0);
  batch.step_peak_real_tokens = 70;
  batch.step_peak_trainable_tokens = 66;
  batch.step_peak_samples = 9;
  EXPECT_EQ(graph_shape(batch), (GraphShape{128, 128, 16}));
  const HostBatch flat = flatten(batch);
  const GraphBatch padded = graph_batch(flat, 0);
  EXPECT_EQ(padded.shape, (GraphShape{128, 128, 16}));
  const auto in = graph_inputs(at::tensor(padded.values, at::TensorOptions().dtype(at::kLong)), padded.shape);
  EXPECT_EQ(in.target_weights.sum().item<float>(), static_cast<float>(flat.trainable_tokens));
  EXPECT_TRUE(in.cu_seqlens.narrow(0, 4, 13).eq(128).all().item<bool>());
  // Peaks below the batch's own extents change nothing.
  batch.step_peak_real_tokens = 3;
  batch.step_peak_trainable_tokens = 1;
  batch.step_peak_samples = 1;
  EXPECT_EQ(graph_shape(batch), (GraphShape{64, 64, 8}));
}

TEST(GraphBatch, RejectsUnflattenedBatches) {
  EXPECT_THROW(graph_batch(collate(samples(), {0, 1}, 0), 0), Error);
}

}  // namespace
}  // namespace finetune
