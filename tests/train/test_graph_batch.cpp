// The fixed-shape layout that CUDA graphs of micro-steps replay (train/graph_batch.h).
#include <gtest/gtest.h>

#include "finetune/data/batch.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/graph_batch.h"
#include "finetune/train/pair_objective.h"
#include "finetune/train/sequence_log_probs.h"
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
  EXPECT_EQ(padded.shape, (GraphShape{64, 64, 8, 0, 0, 64}));
  EXPECT_EQ(padded.trainable_tokens, flat.trainable_tokens);
  EXPECT_EQ(padded.real_tokens, 10);
  ASSERT_EQ(padded.values.size(), size_t{2 * 64 + 3 * 64 + 9 + 1});

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
  EXPECT_EQ(in.real_tokens.item<int64_t>(), 10);
  // The router loss's token mask: the 10 real tokens, not the filler's 54.
  EXPECT_TRUE(graph_micro_batch(in, padded.shape).token_mask.equal(at::arange(64).lt(10).to(at::kFloat)));
}

TEST(GraphBatch, ShapeOfAnyLayoutIsTheShapeOfItsFlattenedBatch) {
  const auto data = samples();
  for (const HostBatch& batch : {collate(data, {0, 1, 2}, 0), collate_rows(data, {{0, 1}, {2}}, 0)}) {
    EXPECT_EQ(graph_shape(batch), graph_batch(flatten(batch), 0).shape);
  }
  EXPECT_EQ(graph_shape(collate(data, {0, 1, 2}, 0)), (GraphShape{64, 64, 8, 0, 0, 64}));
}

// A row that fills its bucket exactly (a full packed row of 2048) takes that bucket with an empty
// filler: no padding, and the token mask still counts every real token.
TEST(GraphBatch, AFullBucketTakesNoFiller) {
  for (int64_t length : {64, 2048}) {
    std::vector<Sample> one = {{std::vector<int32_t>(length, 9), std::vector<int32_t>(length, 9)}};
    const GraphBatch padded = graph_batch(flatten(collate(one, {0}, 0)), 0);
    EXPECT_EQ(padded.shape, (GraphShape{length, length, 8, 0, 0, length})) << length;
    const auto in = graph_inputs(at::tensor(padded.values, at::TensorOptions().dtype(at::kLong)), padded.shape);
    EXPECT_TRUE(in.cu_seqlens.narrow(0, 1, 8).eq(length).all().item<bool>()) << length;
    EXPECT_EQ(in.real_tokens.item<int64_t>(), length);
    EXPECT_TRUE(graph_micro_batch(in, padded.shape).token_mask.equal(at::ones({length}))) << length;
  }
  // One token more needs the next bucket, and the filler then fills it.
  std::vector<Sample> over = {{std::vector<int32_t>(65, 9), std::vector<int32_t>(65, 9)}};
  const GraphBatch padded = graph_batch(flatten(collate(over, {0}, 0)), 0);
  EXPECT_EQ(padded.shape, (GraphShape{128, 64, 8, 0, 0, 128}));
  const auto in = graph_inputs(at::tensor(padded.values, at::TensorOptions().dtype(at::kLong)), padded.shape);
  EXPECT_TRUE(graph_micro_batch(in, padded.shape).token_mask.equal(at::arange(128).lt(65).to(at::kFloat)));
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

at::Tensor longs(const std::vector<int64_t>& values) { return at::tensor(values, at::TensorOptions().dtype(at::kLong)); }

TEST(GraphLongestBucket, PowersOfTwoFrom64UpToTheRow) {
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> cases = {
      {1, 2048, 64}, {64, 2048, 64}, {65, 2048, 128}, {700, 2048, 1024}, {1025, 2048, 2048}, {1025, 1152, 1152}};
  for (const auto& [length, tokens, bucket] : cases) EXPECT_EQ(graph_longest_bucket(length, tokens), bucket) << length;
}

// A row beyond kCudaGraphMaxTokens of short samples: attention's max_seqlen bounds its samples and
// its filler, not the whole row (a bound of the row would size the kernel's grid for samples 16x
// longer than any). Rows up to it take that bound where it is at most a quarter of the row.
TEST(GraphBatch, AttentionsBoundIsTheLongestSampleOrFiller) {
  std::vector<Sample> rows;
  std::vector<int64_t> order;
  for (int i = 0; i < 40; ++i) {
    const size_t length = i == 7 ? 130 : 100;
    rows.push_back({std::vector<int32_t>(length, 4), std::vector<int32_t>(length, 4)});
    order.push_back(i);
  }
  HostBatch packed = collate_rows(rows, {order}, 0);  // 4,030 tokens in one row
  const GraphBatch padded = graph_batch(flatten(packed), 0);
  EXPECT_EQ(padded.shape.tokens, 4096);
  EXPECT_EQ(padded.shape.longest, 256);  // the 130-token sample; the filler has 66
  const auto in = graph_inputs(longs(padded.values), padded.shape);
  const MicroBatchInputs batch = graph_micro_batch(in, padded.shape);
  EXPECT_EQ(batch.mask.max_seqlen, 256);
  const auto lengths = in.cu_seqlens.slice(0, 1) - in.cu_seqlens.slice(0, 0, -1);
  EXPECT_EQ(lengths.max().item<int>(), 130);
  EXPECT_EQ(graph_shape(packed), padded.shape);

  // 41 samples (4,130 tokens) take the 4,608 bucket: the filler of 478 tokens, longer than any
  // sample, sets the bound.
  rows.push_back({std::vector<int32_t>(100, 4), std::vector<int32_t>(100, 4)});
  order.push_back(40);
  const HostBatch longer = collate_rows(rows, {order}, 0);
  const GraphShape shape = graph_shape(longer);
  EXPECT_EQ(shape.tokens, 4608);
  EXPECT_EQ(shape.longest, 512);
  const GraphBatch wide = graph_batch(flatten(longer), 0);
  EXPECT_EQ(wide.shape, shape);
  const auto wide_in = graph_inputs(longs(wide.values), wide.shape);
  const auto wide_lengths = wide_in.cu_seqlens.slice(0, 1) - wide_in.cu_seqlens.slice(0, 0, -1);
  EXPECT_EQ(wide_lengths.max().item<int>(), 478);

  // Up to the limit the tight bound where it is at most a quarter of the row, else the row: 20 of
  // those samples (2,030 tokens) in the 2048 bucket are bounded by 256; 13 of them (1,330 tokens)
  // and one of 700 would be bounded by 1,024, half the row, so the row (2,048) stays the bound.
  rows.resize(20);
  order.resize(20);
  EXPECT_EQ(graph_shape(collate_rows(rows, {order}, 0)).longest, 256);
  rows.resize(13);
  order.resize(14);
  rows.push_back({std::vector<int32_t>(700, 4), std::vector<int32_t>(700, 4)});
  const HostBatch with_long = collate_rows(rows, {order}, 0);
  EXPECT_EQ(graph_shape(with_long).tokens, 2048);
  EXPECT_EQ(graph_shape(with_long).longest, 2048);
}

TEST(GraphBatch, RejectsUnflattenedBatches) {
  EXPECT_THROW(graph_batch(collate(samples(), {0, 1}, 0), 0), Error);
}

TEST(GraphPairBucket, PowersOfTwoFromOne) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {9, 16}};
  for (const auto& [count, bucket] : cases) EXPECT_EQ(graph_pair_bucket(count), bucket) << count;
}

// Two pairs (group ids 7 and 3): the chosen samples 5+3 tokens, then the rejected ones 4+2, as the
// preference objectives take them (train/pair_objective.h).
HostBatch two_pairs() {
  const std::vector<Sample> pairs = {{{5, 6, 7, 8, 9}, {-100, -100, 7, 8, 9}},
                                     {{10, 11, 12}, {-100, 11, 12}},
                                     {{5, 6, 17, 18}, {-100, -100, 17, 18}},
                                     {{10, 21}, {-100, 21}}};
  HostBatch batch = collate(pairs, {0, 1, 2, 3}, 0);
  batch.group_ids = {7, 3};
  return batch;
}

GraphBatch pair_graph_batch(const HostBatch& batch, GraphSections sections) {
  HostBatch flat = flatten(batch);
  flat.group_ids = batch.group_ids;
  return graph_batch(flat, /*filler_token_id=*/0, sections);
}

std::vector<int64_t> repeated(std::vector<int64_t> head, size_t size, int64_t value) {
  head.resize(size, value);
  return head;
}

TEST(GraphBatch, PairSlotsNameEachTargetsSequenceThePairsAndTheChosenNextTokens) {
  const HostBatch batch = two_pairs();
  const GraphSections orpo{/*pairs=*/true, /*chosen_next_tokens=*/true};
  const GraphBatch padded = pair_graph_batch(batch, orpo);
  EXPECT_EQ(padded.shape, (GraphShape{64, 64, 8, 2, 64, 64}));
  EXPECT_EQ(graph_shape(batch, orpo), padded.shape);
  ASSERT_EQ(padded.values.size(), size_t{2 * 64 + 3 * 64 + 9 + 1 + (64 + 2 + 2 + 1) + (3 * 64 + 1)});
  const auto in = graph_inputs(longs(padded.values), padded.shape);
  // Trained positions (flat row 5,6,7,8,9 | 10,11,12 | 5,6,17,18 | 10,21): 1 2 3 | 5 6 | 9 10 | 12;
  // chosen sample s is sequence s, rejected sample s is 2 + s; the 56 weight-0 rows sequence 4.
  EXPECT_TRUE(in.target_positions.narrow(0, 0, 8).equal(longs({1, 2, 3, 5, 6, 9, 10, 12})));
  const PairSlots& pairs = in.pairs;
  EXPECT_EQ(pairs.slots, 2);
  EXPECT_TRUE(pairs.sequence_of_target.equal(longs(repeated({0, 0, 0, 1, 1, 2, 2, 3}, 64, 4))));
  EXPECT_TRUE(pairs.group_ids.equal(longs({7, 3})));
  EXPECT_TRUE(pairs.real.equal(at::ones({2}, at::TensorOptions().dtype(at::kBool))));
  EXPECT_EQ(pairs.count.item<float>(), 2.0f);
  EXPECT_EQ(pairs.count.dim(), 0);
  // Every next token of the chosen samples (positions 0-3 and 5-6), then 58 filler rows on the
  // filler's last position.
  EXPECT_TRUE(pairs.chosen_next_tokens.positions.equal(longs(repeated({0, 1, 2, 3, 5, 6}, 64, 63))));
  EXPECT_TRUE(pairs.chosen_next_tokens.ids.equal(longs(repeated({6, 7, 8, 9, 11, 12}, 64, 0))));
  EXPECT_TRUE(pairs.chosen_next_token_filler.equal(longs(repeated({0, 0, 0, 0, 0, 0}, 64, 1))));
  EXPECT_EQ(pairs.chosen_next_token_count.item<float>(), 6.0f);

  // The same sequences and NLL targets as the eager padding-free layout finds on the device.
  const DeviceBatch eager = to_device(batch, at::kCPU, BatchLayout::kFlatRowMasked);
  const PairSequences sequences = pair_sequences(micro_batch_inputs(eager), "test");
  EXPECT_TRUE(pairs.sequence_of_target.narrow(0, 0, 8).equal(sequences.sequence_of_target));
  const TokenTargets nll = every_next_token_targets(eager.input_ids.slice(1, 0, sequences.chosen_columns),
                                                    eager.position_ids.slice(1, 0, sequences.chosen_columns), 1);
  EXPECT_TRUE(pairs.chosen_next_tokens.positions.narrow(0, 0, 6).equal(nll.positions));
  EXPECT_TRUE(pairs.chosen_next_tokens.ids.narrow(0, 0, 6).equal(nll.ids));
}

// 3 pairs take 4 pair slots: a filler pair of group id 0 that is not real; the rejected sequences
// start at slot 4.
TEST(GraphBatch, PairSlotsPadToThePairBucketWithFillerPairs) {
  const std::vector<Sample> samples = {{{5, 6, 7, 8, 9}, {-100, -100, 7, 8, 9}},
                                       {{10, 11, 12}, {-100, 11, 12}},
                                       {{30, 31}, {-100, 31}},
                                       {{5, 6, 17, 18}, {-100, -100, 17, 18}},
                                       {{10, 21}, {-100, 21}},
                                       {{40, 41}, {-100, 41}}};
  HostBatch batch = collate(samples, {0, 1, 2, 3, 4, 5}, 0);
  batch.group_ids = {7, 3, 9};
  const GraphSections dpo{/*pairs=*/true, /*chosen_next_tokens=*/false};
  const GraphBatch padded = pair_graph_batch(batch, dpo);
  EXPECT_EQ(padded.shape, (GraphShape{64, 64, 8, 4, 0, 64}));
  ASSERT_EQ(padded.values.size(), size_t{2 * 64 + 3 * 64 + 9 + 1 + (64 + 4 + 4 + 1)});
  const auto in = graph_inputs(longs(padded.values), padded.shape);
  const PairSlots& pairs = in.pairs;
  EXPECT_EQ(pairs.slots, 4);
  // Trained positions: 1 2 3 | 5 6 | 8 (chosen 0, 1, 2) | 11 12 | 14 | 16 (rejected 0, 1, 2 at slots 4, 5, 6).
  EXPECT_TRUE(pairs.sequence_of_target.equal(longs(repeated({0, 0, 0, 1, 1, 2, 4, 4, 5, 6}, 64, 8))));
  EXPECT_TRUE(pairs.group_ids.equal(longs({7, 3, 9, 0})));
  EXPECT_TRUE(pairs.real.equal(longs({1, 1, 1, 0}).to(at::kBool)));
  EXPECT_EQ(pairs.count.item<float>(), 3.0f);
  EXPECT_FALSE(pairs.chosen_next_tokens.positions.defined());
  // Without sections the buffer is the causal-LM one.
  EXPECT_EQ(graph_shape(batch), (GraphShape{64, 64, 8, 0, 0, 64}));
}

TEST(GraphBatch, PairSlotsNeedWholePairsWithTheirGroupIds) {
  HostBatch batch = two_pairs();
  batch.group_ids = {7};
  EXPECT_THROW(pair_graph_batch(batch, {true, false}), Error);
  HostBatch odd = collate(samples(), {0, 1, 2}, 0);
  odd.group_ids = {0};
  EXPECT_THROW(pair_graph_batch(odd, {true, false}), Error);
}

}  // namespace
}  // namespace finetune
