#include <gtest/gtest.h>

#include <numeric>

#include "finetune/ddp/grad_reducer.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

TEST(AssignBuckets, ReverseOrderWithSmallFirstBucket) {
  // 5 x 100 bytes, first bucket 150, then 250: [4] [3 2] [1 0]
  EXPECT_EQ(assign_buckets({100, 100, 100, 100, 100}, 150, 250), (Buckets{{4}, {3, 2}, {1, 0}}));
}

TEST(AssignBuckets, ExactFitStaysInOneBucket) {
  EXPECT_EQ(assign_buckets({50, 50, 100, 100}, 100, 200), (Buckets{{3}, {2, 1, 0}}));
}

TEST(AssignBuckets, ParameterLargerThanCapGetsItsOwnBucket) {
  EXPECT_EQ(assign_buckets({10, 1000, 10, 10}, 50, 100), (Buckets{{3, 2}, {1}, {0}}));
}

TEST(AssignBuckets, CapRespectedAndEveryParameterOnceInReverseOrder) {
  std::vector<int64_t> bytes;
  for (int i = 0; i < 40; ++i) bytes.push_back(4 * ((i * 37) % 23 + 1));
  const int64_t first = 64, cap = 200;
  const Buckets buckets = assign_buckets(bytes, first, cap);
  std::vector<size_t> order;
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t total = 0;
    for (size_t index : buckets[b]) {
      total += bytes[index];
      order.push_back(index);
    }
    ASSERT_FALSE(buckets[b].empty());
    if (buckets[b].size() > 1) {
      EXPECT_LE(total, b == 0 ? first : cap) << "bucket " << b;
    }
    // A bucket is only closed when the next parameter would not fit.
    if (b + 1 < buckets.size()) {
      EXPECT_GT(total + bytes[buckets[b + 1].front()], b == 0 ? first : cap);
    }
  }
  std::vector<size_t> expected(bytes.size());
  std::iota(expected.rbegin(), expected.rend(), 0);
  EXPECT_EQ(order, expected);
  EXPECT_GT(buckets.size(), 3u);
}

TEST(AssignBuckets, EmptyAndInvalid) {
  EXPECT_TRUE(assign_buckets({}, 10, 10).empty());
  EXPECT_THROW(assign_buckets({4}, 0, 10), UsageError);
  EXPECT_THROW(assign_buckets({4}, 10, -1), UsageError);
  EXPECT_THROW(assign_buckets({4, -4}, 10, 10), Error);
}

}  // namespace
}  // namespace finetune
