// When attention runs per KV head (Note [Head-grouped flash attention]): flash attention's backward
// scratch, by hand. The grouped path itself needs flash attention (CUDA): tests/cuda.
#include <gtest/gtest.h>

#include "finetune/model/head_group_attention.h"

namespace finetune {
namespace {

TEST(HeadGroupAttention, ScratchIsTheQueryAccumulatorAndTheExpandedKeyValueGradients) {
  // Llama-3-8B: 32 query heads on 8 KV heads of 128, bf16. 32,768 tokens: the fp32 accumulator
  // 32768 x 32 x 128 x 4 = 512 MiB, the two expanded gradients 2 x 32768 x 32 x 128 x 2 = 512 MiB.
  EXPECT_EQ(head_group_attention_scratch_bytes(32768, 32, 8, 128, 2), int64_t{1} << 30);
  // No grouped query heads: nothing is expanded.
  EXPECT_EQ(head_group_attention_scratch_bytes(32768, 32, 32, 128, 2), int64_t{512} << 20);
  // The threshold: one token more than 32k on the 8B runs per KV head.
  EXPECT_FALSE(head_group_attention_scratch_bytes(32768, 32, 8, 128, 2) > kHeadGroupAttentionBytes);
  EXPECT_TRUE(head_group_attention_scratch_bytes(32769, 32, 8, 128, 2) > kHeadGroupAttentionBytes);
}

}  // namespace
}  // namespace finetune
