// dequantize_nf4_batch_into (quant/nf4.h) on the GPU: one kernel launch for many 4-bit weights (an
// expert stack's pieces, quant/nf4_stack.h) gives bit for bit what one dequantize_nf4_into per
// weight gives, on both of its kernels' paths (16-element groups; single bytes when a size or an
// alignment does not allow groups), for every weight and output dtype, with and without double
// quantization, NF4 and FP4, past one launch's 256 pieces; and equals the CPU's dequantization of
// the same pieces.
#include <gtest/gtest.h>

#include "../model/expert_stack_4bit_cases.h"
#include "../reference/tensor_fixtures.h"
#include "finetune/quant/nf4.h"
#include "finetune/quant/nf4_stack.h"

namespace finetune {
namespace {

using reference::same_bits;

const at::Device kCuda(at::kCUDA, 0);

// Every weights[i] dequantized on its own (dequantize_nf4_into) into a fresh `dtype` buffer.
std::vector<at::Tensor> one_by_one(const std::vector<Nf4Weight>& weights, at::ScalarType dtype) {
  std::vector<at::Tensor> out;
  for (const auto& w : weights) out.push_back(dequantize_nf4(w, dtype));
  return out;
}

std::vector<at::Tensor> batched(const std::vector<Nf4Weight>& weights, at::ScalarType dtype) {
  std::vector<const Nf4Weight*> pointers;
  std::vector<at::Tensor> out;
  for (const auto& w : weights) {
    pointers.push_back(&w);
    out.push_back(at::empty(w.shape, w.packed.options().dtype(dtype)));
  }
  dequantize_nf4_batch_into(pointers, out);
  return out;
}

// `count` weights of `shape`, quantized on the GPU.
std::vector<Nf4Weight> random_weights(int64_t count, std::vector<int64_t> shape, at::ScalarType dtype, bool nested,
                                      int64_t blocksize, QuantType4bit type) {
  std::vector<Nf4Weight> out;
  for (int64_t i = 0; i < count; ++i) {
    const auto weight = at::randn(shape, at::TensorOptions().dtype(dtype).device(kCuda));
    out.push_back(quantize_nf4(weight, nested, blocksize, type));
  }
  return out;
}

void expect_batch_equals_one_by_one(const std::vector<Nf4Weight>& weights) {
  for (auto out_dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
    const auto want = one_by_one(weights, out_dtype);
    const auto got = batched(weights, out_dtype);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(same_bits(got[i], want[i])) << "weight " << i << " " << out_dtype;
    }
  }
}

TEST(Nf4BatchDequantize, GroupedPathEqualsOneLaunchPerWeight) {
  at::manual_seed(0);
  for (auto dtype : {at::kBFloat16, at::kFloat, at::kHalf}) {
    for (bool nested : {true, false}) {
      for (auto type : {QuantType4bit::NF4, QuantType4bit::FP4}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + (nested ? " nested " : " plain ") + quant_type_name(type));
        expect_batch_equals_one_by_one(random_weights(6, {48, 128}, dtype, nested, 64, type));
      }
    }
  }
}

TEST(Nf4BatchDequantize, BytePathEqualsOneLaunchPerWeight) {
  at::manual_seed(1);
  // 7 x 9 = 63 elements: no 16-element groups, an odd count, a short last block.
  expect_batch_equals_one_by_one(random_weights(5, {7, 9}, at::kBFloat16, true, 64, QuantType4bit::NF4));
  // Groups would fit each weight, but one of them is not: the whole launch takes bytes.
  auto mixed = random_weights(4, {32, 64}, at::kBFloat16, true, 64, QuantType4bit::NF4);
  mixed.push_back(random_weights(1, {3, 5}, at::kBFloat16, true, 64, QuantType4bit::NF4).front());
  expect_batch_equals_one_by_one(mixed);
  // Blocks of 32 with groups of 16; and a large block size (4096).
  expect_batch_equals_one_by_one(random_weights(3, {16, 64}, at::kFloat, false, 32, QuantType4bit::NF4));
  expect_batch_equals_one_by_one(random_weights(3, {64, 96}, at::kBFloat16, true, 4096, QuantType4bit::NF4));
}

TEST(Nf4BatchDequantize, MoreThanOneLaunchOfPieces) {
  at::manual_seed(2);
  expect_batch_equals_one_by_one(random_weights(600, {8, 64}, at::kBFloat16, true, 64, QuantType4bit::NF4));
}

TEST(Nf4BatchDequantize, WeightsOfDifferentDtypesFallBackToOneLaunchEach) {
  at::manual_seed(3);
  auto weights = random_weights(2, {16, 32}, at::kBFloat16, true, 64, QuantType4bit::NF4);
  weights.push_back(random_weights(1, {16, 32}, at::kFloat, true, 64, QuantType4bit::NF4).front());
  weights.push_back(random_weights(1, {16, 32}, at::kBFloat16, true, 64, QuantType4bit::FP4).front());
  expect_batch_equals_one_by_one(weights);
}

TEST(Nf4BatchDequantize, ExpertStackEqualsPerPieceDequantizationAndTheCpus) {
  at::manual_seed(4);
  for (auto dtype : {at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(c10::toString(dtype));
    // 8 experts of two 48-row pieces (gate, up), quantized on the CPU as the loader may.
    const auto cpu = testing_moe::quantize_stack(at::randn({8, 96, 128}).to(dtype), 48);
    Nf4Stack gpu = *cpu;
    for (auto& piece : gpu.pieces) piece.weight = piece.weight.to(kCuda);
    for (auto out_dtype : {dtype, at::kBFloat16}) {
      const auto stack = dequantize_nf4_stack(gpu, out_dtype);
      auto per_piece = at::empty(gpu.shape, stack.options());
      for (const auto& piece : gpu.pieces) {
        auto rows = per_piece[piece.expert].narrow(0, piece.row_begin, piece.weight.shape[0]);
        dequantize_nf4_into(piece.weight, rows);
      }
      EXPECT_TRUE(same_bits(stack, per_piece)) << out_dtype;
      EXPECT_TRUE(same_bits(stack.cpu(), dequantize_nf4_stack(*cpu, out_dtype))) << out_dtype;
    }
  }
}

}  // namespace
}  // namespace finetune
