// When attention runs per KV head (Note [Head-grouped flash attention]): flash attention's backward
// scratch, by hand; which kernel a row's groups run (Note [Head-grouped cuDNN attention]), and the
// rows the cuDNN kernel refuses before any kernel runs. The grouped kernels themselves need CUDA:
// tests/cuda.
#include <gtest/gtest.h>

#include "finetune/model/head_group_attention.h"
#include "finetune/util/errors.h"

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

TEST(HeadGroupAttention, CudnnOnlyForOneSampleOfTheWholeRowWithoutAWindowBelowTwoToThe31QueryElements) {
  const auto cudnn = HeadGroupKernel::kCudnn, flash = HeadGroupKernel::kFlash;
  EXPECT_EQ(kDefaultHeadGroupKernel, cudnn);
  const int64_t width = 32 * 128;  // Llama-3.1-8B's query heads x head_dim
  EXPECT_EQ(head_group_kernel_for(cudnn, {40000}, 40000, width, /*windowed=*/false), cudnn);
  // Asked for flash, or not one sample of all the row's tokens, or a sliding layer.
  EXPECT_EQ(head_group_kernel_for(flash, {40000}, 40000, width, false), flash);
  EXPECT_EQ(head_group_kernel_for(cudnn, {30000, 10000}, 40000, width, false), flash);
  EXPECT_EQ(head_group_kernel_for(cudnn, {39000}, 40000, width, false), flash);
  EXPECT_EQ(head_group_kernel_for(cudnn, {40000}, 40000, width, /*windowed=*/true), flash);
  // A graphed micro-step's mask has its lengths on the device only.
  EXPECT_EQ(head_group_kernel_for(cudnn, {}, 40000, width, false), flash);
  // 2^31 query elements: 524,288 tokens of 32 x 128 run flash, one token fewer cuDNN (its query
  // gradient was wrong at 557,056 tokens on an H100).
  EXPECT_EQ(head_group_kernel_for(cudnn, {524287}, 524287, width, false), cudnn);
  EXPECT_EQ(head_group_kernel_for(cudnn, {524288}, 524288, width, false), flash);
  EXPECT_EQ(head_group_kernel_for(cudnn, {655360}, 655360, width, false), flash);
  // Fewer heads address more tokens.
  EXPECT_EQ(head_group_kernel_for(cudnn, {655360}, 655360, 16 * 128, false), cudnn);
}

TEST(HeadGroupAttention, KernelNamesRoundTrip) {
  for (const auto kernel : {HeadGroupKernel::kFlash, HeadGroupKernel::kCudnn}) {
    EXPECT_EQ(head_group_kernel_named(head_group_kernel_name(kernel)), kernel);
  }
  EXPECT_EQ(std::string(head_group_kernel_name(HeadGroupKernel::kCudnn)), "cudnn");
  EXPECT_FALSE(head_group_kernel_named("cuDNN").has_value());
  EXPECT_FALSE(head_group_kernel_named("").has_value());
}

// The refusals come before any kernel, so CPU tensors reach them.
TEST(HeadGroupAttention, CudnnKernelRefusesSeveralSamplesAWindowOrAShortSample) {
  const auto q = at::zeros({6, 4, 8}), kv = at::zeros({6, 2, 8});
  auto refusal = [&](const std::vector<int32_t>& cu, int64_t max_seqlen, std::optional<int64_t> window) {
    const HeadGroupArgs args{at::tensor(cu, at::kInt), max_seqlen, 0.35, window, window ? std::optional<int64_t>(0) : std::nullopt,
                             HeadGroupKernel::kCudnn};
    try {
      head_grouped_attention(q, kv, kv, args);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(refusal({0, 2, 6}, 4, std::nullopt).find("2 samples"), std::string::npos);
  EXPECT_NE(refusal({0, 5}, 5, std::nullopt).find("max_seqlen 5 for 6 tokens"), std::string::npos);
  EXPECT_NE(refusal({0, 6}, 6, 3).find("sliding window"), std::string::npos);
  // 2^31 query elements, as (2^31 / 64) x 4 x 16 zero-stride views: nothing is allocated.
  const int64_t tokens = (int64_t{1} << 31) / 64;
  const auto long_q = at::zeros({1}).expand({tokens, 4, 16}), long_kv = at::zeros({1}).expand({tokens, 2, 16});
  const HeadGroupArgs long_args{at::tensor(std::vector<int32_t>{0, static_cast<int32_t>(tokens)}, at::kInt), tokens,
                                0.25, std::nullopt, std::nullopt, HeadGroupKernel::kCudnn};
  try {
    head_grouped_attention(long_q, long_kv, long_kv, long_args);
    ADD_FAILURE() << "2^31 query elements reached the cuDNN kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2147483648 query elements"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace finetune
