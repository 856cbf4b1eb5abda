// llama.cpp's row encodings (gguf_quant_blocks.h) against gguf-py's numpy ports of them
// (tests/reference/make_gguf_quant_fixtures.py wrote gguf_quant_expected.inc): Q4_0, Q5_0, Q5_1
// byte for byte on 768 values (mixed scales, zero blocks, ties, a negative absmax). The K types
// have no gguf-py quantizer: tests/e2e/test_gguf.py compares them with llama_model_quantize.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "../test_support.h"
#include "finetune/gguf/gguf_quant_blocks.h"
#include "finetune/gguf/gguf_quantize.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

#include "gguf_quant_expected.inc"

std::vector<float> input() {
  std::vector<float> out(sizeof kQuantInput / sizeof kQuantInput[0]);
  std::memcpy(out.data(), kQuantInput, sizeof kQuantInput);
  return out;
}

using testing::hex;

TEST(GgufQuantBlocks, Q4_0MatchesGgufPy) {
  const auto x = input();
  EXPECT_EQ(hex(ggml_encode(x.data(), 3, 256, GgmlType::kQ4_0)), kQ4_0Expected);
}

TEST(GgufQuantBlocks, Q5_0MatchesGgufPy) {
  const auto x = input();
  EXPECT_EQ(hex(ggml_encode(x.data(), 3, 256, GgmlType::kQ5_0)), kQ5_0Expected);
}

TEST(GgufQuantBlocks, Q5_1MatchesGgufPy) {
  const auto x = input();
  EXPECT_EQ(hex(ggml_encode(x.data(), 3, 256, GgmlType::kQ5_1)), kQ5_1Expected);
}

TEST(GgufQuantBlocks, BlockSizesAndRowChecks) {
  const auto x = input();
  EXPECT_EQ(ggml_encode(x.data(), 3, 256, GgmlType::kQ4_K).size(), 3u * 144);
  EXPECT_EQ(ggml_encode(x.data(), 3, 256, GgmlType::kQ5_K).size(), 3u * 176);
  EXPECT_EQ(ggml_encode(x.data(), 3, 256, GgmlType::kQ6_K).size(), 3u * 210);
  EXPECT_EQ(ggml_encode(x.data(), 24, 32, GgmlType::kQ5_0).size(), 24u * 22);
  EXPECT_THROW(ggml_encode(x.data(), 6, 128, GgmlType::kQ6_K), Error);
  EXPECT_THROW(ggml_encode(x.data(), 16, 48, GgmlType::kQ4_0), Error);
}

TEST(GgufQuantBlocks, Q6_KAllZeroSuperBlockIsZeros) {
  const std::vector<float> zeros(256, 0.0f);
  EXPECT_EQ(ggml_encode(zeros.data(), 1, 256, GgmlType::kQ6_K), std::string(210, '\0'));
}

}  // namespace
}  // namespace finetune
