// Sampler: permutations, DistributedSampler-style rank streams, micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "finetune/data/sampler.h"
#include "finetune/util/errors.h"
#include "fixtures.h"

namespace finetune {
namespace {

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> iota_vector(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(EpochSampler, PermutationIsAPermutationAndDeterministic) {
  for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
    const std::vector<int64_t> p = epoch_permutation(n, 42, 3);
    EXPECT_EQ(sorted(p), iota_vector(n)) << n;
    EXPECT_EQ(p, epoch_permutation(n, 42, 3)) << n;
  }
}

TEST(EpochSampler, PermutationDependsOnSeedAndEpoch) {
  const std::vector<int64_t> base = epoch_permutation(1000, 42, 0);
  EXPECT_NE(base, epoch_permutation(1000, 42, 1));
  EXPECT_NE(base, epoch_permutation(1000, 43, 0));
  EXPECT_NE(epoch_permutation(1000, 42, 1), epoch_permutation(1000, 43, 0));
  EXPECT_NE(base, iota_vector(1000));
}

// The permutation must be identical on every platform and standard library: compare with the
// independent Python implementation in make_data_fixtures.py.
TEST(EpochSampler, PermutationMatchesReference) {
  const nlohmann::json fixture = data_test::load_data_fixture("sampler.json");
  ASSERT_GE(fixture.at("permutations").size(), 8u);
  for (const auto& c : fixture.at("permutations")) {
    const uint64_t seed = std::stoull(c.at("seed").get<std::string>());
    EXPECT_EQ(epoch_permutation(c.at("n"), seed, c.at("epoch")), c.at("expected").get<std::vector<int64_t>>())
        << "n=" << c.at("n") << " seed=" << seed << " epoch=" << c.at("epoch");
  }
  EXPECT_EQ(epoch_permutation(10, 1234, 5), (std::vector<int64_t>{4, 7, 9, 3, 1, 2, 0, 5, 8, 6}));
}

TEST(EpochSampler, PermutationIsRoughlyUniform) {
  // Position of element 0 over many seeds: each of 5 slots should get about 1/5.
  std::vector<int> counts(5, 0);
  for (uint64_t seed = 0; seed < 5000; ++seed) {
    const std::vector<int64_t> p = epoch_permutation(5, seed, 0);
    counts[std::find(p.begin(), p.end(), 0) - p.begin()]++;
  }
  for (int c : counts) {
    EXPECT_GT(c, 900);
    EXPECT_LT(c, 1100);
  }
}

TEST(EpochSampler, NoShuffleIsIdentity) {
  SamplerConfig config;
  config.num_samples = 10;
  config.shuffle = false;
  EXPECT_EQ(rank_indices(config, 0), iota_vector(10));
  EXPECT_EQ(rank_indices(config, 7), iota_vector(10));
  config.world_size = 3;
  config.rank = 1;
  EXPECT_EQ(rank_indices(config, 0), (std::vector<int64_t>{1, 4, 7, 0}));  // 10 padded to 12 by wrapping
  config.drop_last = true;
  EXPECT_EQ(rank_indices(config, 0), (std::vector<int64_t>{1, 4, 7}));
}

TEST(EpochSampler, RanksCoverEverySampleDisjointly) {
  for (int64_t n : {1, 2, 5, 12, 13, 101}) {
    for (int world : {1, 2, 3, 4}) {
      for (bool drop_last : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world) + " drop_last=" +
                     std::to_string(drop_last));
        SamplerConfig config;
        config.num_samples = n;
        config.world_size = world;
        config.seed = 7;
        config.drop_last = drop_last;
        const std::vector<int64_t> perm = epoch_permutation(n, 7, 2);
        std::vector<int64_t> all;
        size_t per_rank = 0;
        for (int rank = 0; rank < world; ++rank) {
          config.rank = rank;
          const std::vector<int64_t> mine = rank_indices(config, 2);
          if (rank == 0) per_rank = mine.size();
          EXPECT_EQ(mine.size(), per_rank) << "ranks must take equal numbers of samples";
          EXPECT_EQ(mine, rank_indices(config, 2));
          // rank r takes positions r, r + world, ... of the (padded) permutation
          for (size_t i = 0; i < mine.size(); ++i) {
            EXPECT_EQ(mine[i], perm[(i * world + rank) % n]);
          }
          all.insert(all.end(), mine.begin(), mine.end());
        }
        if (drop_last) {
          EXPECT_EQ(static_cast<int64_t>(all.size()), n / world * world);
          EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size()) << "disjoint";
        } else {
          const int64_t total = (n + world - 1) / world * world;
          EXPECT_EQ(static_cast<int64_t>(all.size()), total);
          std::map<int64_t, int> seen;
          for (int64_t i : all) seen[i]++;
          EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "every sample visited";
          // the padding duplicates the first (total - n) samples of the permutation
          for (int64_t pos = 0; pos < n; ++pos) {
            const int64_t expected = 1 + (total - n) / n + (pos < (total - n) % n ? 1 : 0);
            EXPECT_EQ(seen[perm[pos]], expected) << pos;
          }
        }
      }
    }
  }
}

TEST(EpochSampler, DifferentEpochsGiveDifferentOrders) {
  SamplerConfig config;
  config.num_samples = 64;
  config.world_size = 2;
  config.rank = 1;
  EXPECT_NE(rank_indices(config, 0), rank_indices(config, 1));
  EXPECT_EQ(sorted(rank_indices(config, 0)).size(), 32u);
}

TEST(EpochSampler, RankMicroBatchesUnionEqualsSingleProcessBatch) {
  const int64_t batch = 3;
  for (int64_t n : {24, 25, 50, 7}) {
    for (int world : {1, 2, 3, 4}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world));
      SamplerConfig single;
      single.num_samples = n;
      single.seed = 99;
      const auto single_batches = micro_batches(rank_indices(single, 4), batch * world, false, {}, false);
      std::vector<std::vector<std::vector<int64_t>>> per_rank;
      for (int rank = 0; rank < world; ++rank) {
        SamplerConfig config = single;
        config.world_size = world;
        config.rank = rank;
        per_rank.push_back(micro_batches(rank_indices(config, 4), batch, false, {}, false));
      }
      // every full single-process batch equals the union of the ranks' batches at that step
      const size_t full = static_cast<size_t>(n / (batch * world));
      ASSERT_GE(per_rank[0].size(), full);
      for (size_t step = 0; step < full; ++step) {
        std::vector<int64_t> together;
        for (const auto& batches : per_rank) together.insert(together.end(), batches[step].begin(), batches[step].end());
        EXPECT_EQ(sorted(together), sorted(single_batches[step])) << "step " << step;
      }
    }
  }
}

TEST(EpochSampler, MicroBatchesSplitAndDropLast) {
  const std::vector<int64_t> indices = {5, 3, 8, 1, 0, 9, 2};
  EXPECT_EQ(micro_batches(indices, 3, false, {}, false),
            (std::vector<std::vector<int64_t>>{{5, 3, 8}, {1, 0, 9}, {2}}));
  EXPECT_EQ(micro_batches(indices, 3, false, {}, true), (std::vector<std::vector<int64_t>>{{5, 3, 8}, {1, 0, 9}}));
  EXPECT_EQ(micro_batches({}, 3, false, {}, false).size(), 0u);
  EXPECT_THROW(micro_batches(indices, 0, false, {}, false), Error);
}

TEST(EpochSampler, GroupByLengthSortsWithinWindows) {
  // batch 1 -> windows of 50 indices; lengths = index % 7 so sorting is visible.
  const std::vector<int64_t> indices = epoch_permutation(120, 3, 0);
  std::vector<int64_t> lengths(120);
  for (int64_t i = 0; i < 120; ++i) lengths[i] = i % 7;
  const auto batches = micro_batches(indices, 1, true, lengths, false);
  ASSERT_EQ(batches.size(), 120u);
  std::vector<int64_t> flat;
  for (const auto& b : batches) flat.push_back(b.at(0));
  for (size_t begin : {0u, 50u, 100u}) {
    const size_t end = std::min<size_t>(begin + 50, 120);
    // same members as the window of the input, in non-increasing length, ties in input order
    EXPECT_EQ(sorted({flat.begin() + begin, flat.begin() + end}), sorted({indices.begin() + begin, indices.begin() + end}));
    for (size_t i = begin + 1; i < end; ++i) {
      EXPECT_GE(lengths[flat[i - 1]], lengths[flat[i]]);
      if (lengths[flat[i - 1]] == lengths[flat[i]]) {
        const auto pos = [&](int64_t v) { return std::find(indices.begin(), indices.end(), v) - indices.begin(); };
        EXPECT_LT(pos(flat[i - 1]), pos(flat[i]));
      }
    }
  }
  EXPECT_EQ(batches, micro_batches(indices, 1, true, lengths, false));
  EXPECT_THROW(micro_batches({0, 5}, 2, true, {1, 2}, false), Error);  // no length for index 5
}

TEST(EpochSampler, RejectsBadConfig) {
  SamplerConfig config;
  config.num_samples = 4;
  config.world_size = 2;
  config.rank = 2;
  EXPECT_THROW(rank_indices(config, 0), Error);
  config.world_size = 0;
  config.rank = 0;
  EXPECT_THROW(rank_indices(config, 0), Error);
  config.world_size = 1;
  config.num_samples = 0;
  EXPECT_TRUE(rank_indices(config, 0).empty());
}

}  // namespace
}  // namespace finetune
