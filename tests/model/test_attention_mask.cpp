#include <gtest/gtest.h>

#include "finetune/model/attention_mask.h"

namespace finetune {
namespace {

TEST(AttentionMask, FullRowsNeedNoExplicitMask) {
  auto mask = build_attention_mask({{4}, {4}}, 4, at::kCPU);
  EXPECT_TRUE(mask.is_causal_only);
  EXPECT_FALSE(mask.mask.defined());
}

TEST(AttentionMask, PackedRowIsBlockDiagonalCausalAndPaddingIsolated) {
  // Row 0: samples of length 2 and 3, then one padding position.
  auto mask = build_attention_mask({{2, 3}}, 6, at::kCPU);
  ASSERT_FALSE(mask.is_causal_only);
  ASSERT_EQ(mask.mask.sizes(), (std::vector<int64_t>{1, 1, 6, 6}));
  auto m = mask.mask[0][0];
  const int expected[6][6] = {{1, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0},
                              {0, 0, 1, 1, 0, 0}, {0, 0, 1, 1, 1, 0}, {0, 0, 0, 0, 0, 1}};
  for (int q = 0; q < 6; ++q)
    for (int k = 0; k < 6; ++k) EXPECT_EQ(m[q][k].item<bool>(), expected[q][k] == 1) << q << "," << k;
}

}  // namespace
}  // namespace finetune
