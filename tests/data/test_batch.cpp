// collate() and trainable_token_count().
#include <gtest/gtest.h>

#include <algorithm>

#include "finetune/data/batch.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

std::vector<Sample> three_samples() {
  return {
      {{10, 11, 12, 13}, {-100, -100, 12, 13}},  // 2 trainable after the shift
      {{20, 21}, {20, 21}},                      // position 0 is never a target: 1
      {{30, 31, 32, 33, 34}, {30, -100, 32, -100, 34}},  // 2
  };
}

TEST(HostBatchCollate, TrainableTokenCountSkipsPositionZero) {
  EXPECT_EQ(trainable_token_count({{1, 2, 3}, {1, 2, 3}}), 2);
  EXPECT_EQ(trainable_token_count({{1}, {1}}), 0);
  EXPECT_EQ(trainable_token_count({{1, 2}, {-100, -100}}), 0);
  EXPECT_EQ(trainable_token_count({{}, {}}), 0);
}

TEST(HostBatchCollate, CollateRightPads) {
  const std::vector<Sample> samples = three_samples();
  const HostBatch batch = collate(samples, {1, 0}, /*pad_token_id=*/7);
  EXPECT_EQ(batch.rows, 2);
  EXPECT_EQ(batch.seq_len, 4);
  EXPECT_EQ(batch.input_ids, (std::vector<int64_t>{20, 21, 7, 7, 10, 11, 12, 13}));
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{20, 21, -100, -100, -100, -100, 12, 13}));
  EXPECT_EQ(batch.position_ids, (std::vector<int64_t>{0, 1, 0, 0, 0, 1, 2, 3}));
  EXPECT_EQ(batch.sample_lengths, (std::vector<std::vector<int64_t>>{{2}, {4}}));
  EXPECT_EQ(batch.real_tokens, 6);
  EXPECT_EQ(batch.trainable_tokens, 3);
}

TEST(HostBatchCollate, CollateRejectsBadInput) {
  const std::vector<Sample> samples = three_samples();
  EXPECT_THROW(collate(samples, {}, 0), Error);
  EXPECT_THROW(collate(samples, {3}, 0), Error);
  EXPECT_THROW(collate({{{1, 2}, {1}}}, {0}, 0), Error);
}

}  // namespace
}  // namespace finetune

namespace finetune {
namespace {

std::vector<Sample> packing_samples() {
  return {
      {{10, 11, 12, 13}, {-100, -100, 12, 13}},
      {{20, 21}, {20, 21}},
      {{30, 31, 32, 33, 34}, {30, -100, 32, -100, 34}},
  };
}

TEST(HostBatchPacking, PackedRowRestartsPositionsAndMasksSampleStarts) {
  const auto samples = packing_samples();
  const HostBatch packed = collate_rows(samples, {{0, 1}, {2}}, /*pad_token_id=*/7);
  EXPECT_EQ(packed.rows, 2);
  EXPECT_EQ(packed.seq_len, 6);
  EXPECT_EQ(packed.input_ids, (std::vector<int64_t>{10, 11, 12, 13, 20, 21, 30, 31, 32, 33, 34, 7}));
  EXPECT_EQ(packed.position_ids, (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 0}));
  // Sample 1's first label (20) would be predicted from sample 0's last token: masked.
  EXPECT_EQ(packed.labels, (std::vector<int64_t>{-100, -100, 12, 13, -100, 21, 30, -100, 32, -100, 34, -100}));
  EXPECT_EQ(packed.sample_lengths, (std::vector<std::vector<int64_t>>{{4, 2}, {5}}));
  EXPECT_EQ(packed.real_tokens, 11);
  // Same trainable tokens as the unpacked batch of the same samples.
  EXPECT_EQ(packed.trainable_tokens, collate(samples, {0, 1, 2}, 7).trainable_tokens);
  EXPECT_EQ(packed.trainable_tokens, 5);
}

TEST(HostBatchPacking, FlattenDropsPaddingAndKeepsTargets) {
  const auto samples = packing_samples();
  const HostBatch padded = collate(samples, {2, 0, 1}, 7);
  const HostBatch flat = flatten(padded);
  EXPECT_EQ(flat.rows, 1);
  EXPECT_EQ(flat.seq_len, 11);
  EXPECT_EQ(flat.input_ids, (std::vector<int64_t>{30, 31, 32, 33, 34, 10, 11, 12, 13, 20, 21}));
  EXPECT_EQ(flat.position_ids, (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(flat.labels, (std::vector<int64_t>{-100, -100, 32, -100, 34, -100, -100, 12, 13, -100, 21}));
  EXPECT_EQ(flat.sample_lengths, (std::vector<std::vector<int64_t>>{{5, 4, 2}}));
  EXPECT_EQ(flat.trainable_tokens, padded.trainable_tokens);
  EXPECT_EQ(flat.real_tokens, padded.real_tokens);
}

TEST(HostBatchPacking, PackSamplesIsBestFitDecreasing) {
  const std::vector<int64_t> lengths{4, 2, 5, 3, 1};
  // 5 -> row 0 (1 left); 4 -> row 1 (2 left); 3 -> row 2 (3 left); 2 -> row 1 (fullest fit); 1 -> row 0.
  EXPECT_EQ(pack_samples({0, 1, 2, 3, 4}, lengths, 6),
            (std::vector<std::vector<int64_t>>{{2, 4}, {0, 1}, {3}}));
  EXPECT_EQ(pack_samples({4, 3, 2}, lengths, 9), (std::vector<std::vector<int64_t>>{{2, 3, 4}}));
  EXPECT_THROW(pack_samples({2}, lengths, 4), Error);
  // Every sample exactly once, no row over capacity.
  std::vector<int64_t> many_lengths, order;
  for (int64_t i = 0; i < 200; ++i) {
    many_lengths.push_back(1 + (i * 37) % 50);
    order.push_back(i);
  }
  const auto rows = pack_samples(order, many_lengths, 64);
  std::vector<int64_t> seen;
  for (const auto& row : rows) {
    int64_t used = 0;
    for (int64_t index : row) used += many_lengths[index];
    EXPECT_LE(used, 64);
    seen.insert(seen.end(), row.begin(), row.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, order);
}

}  // namespace
}  // namespace finetune
