// quant/blockwise_8bit.h against bitsandbytes 0.50.2's CPU kernel (tests/reference/make_quant_fixtures.py).
#include <gtest/gtest.h>

#include <string>

#include <ATen/ATen.h>

#include "../reference/tensor_fixtures.h"
#include "finetune/quant/blockwise_8bit.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using reference::load_json_fixture;
using reference::same_bits;
using reference::TensorFixture;

const std::pair<const char*, at::ScalarType> kDtypes[] = {
    {"float32", at::kFloat}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}};

TEST(Blockwise8bit, DynamicMapsAreBitsandbytes) {
  const TensorFixture maps("quant", "dynamic_map.safetensors");
  EXPECT_TRUE(same_bits(dynamic_map(true), maps["signed"]));
  EXPECT_TRUE(same_bits(dynamic_map(false), maps["unsigned"]));
}

// Every case: codes, absmax and the dequantized values in three dtypes, bit for bit.
TEST(Blockwise8bit, QuantizeIsBitsandbytesCpuKernel) {
  const auto cases = load_json_fixture("quant", "blockwise_8bit.json");
  const TensorFixture fixture("quant", "blockwise_8bit.safetensors");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& [name, spec] : cases.items()) {
    SCOPED_TRACE(name);
    const int64_t blocksize = spec.at("blocksize").get<int64_t>();
    const auto code = dynamic_map(spec.at("signed").get<bool>());
    const auto q = quantize_blockwise(fixture[name + ".A"], code, blocksize);
    EXPECT_TRUE(same_bits(q.codes, fixture[name + ".codes"]));
    EXPECT_TRUE(same_bits(q.absmax, fixture[name + ".absmax"]));
    for (const auto& [dtype_name, dtype] : kDtypes) {
      EXPECT_TRUE(same_bits(dequantize_blockwise(q.codes, q.absmax, code, blocksize, dtype),
                            fixture[name + ".dequant." + dtype_name]))
          << dtype_name;
    }
  }
}

TEST(Blockwise8bit, QuantizeIntoWritesTheCallersTensors) {
  const TensorFixture fixture("quant", "blockwise_8bit.safetensors");
  const auto& A = fixture["randn_bf16_bs64.A"];  // (37, 29): 1073 elements, 17 blocks of 64
  auto codes = at::full({A.numel()}, 7, at::TensorOptions().dtype(at::kByte));
  auto absmax = at::full({17}, -1.0f, at::TensorOptions().dtype(at::kFloat));
  const auto* storage = codes.data_ptr();
  quantize_blockwise_into(A, dynamic_map(true), 64, codes, absmax);
  EXPECT_EQ(codes.data_ptr(), storage);
  EXPECT_TRUE(same_bits(codes, fixture["randn_bf16_bs64.codes"].reshape(-1)));
  EXPECT_TRUE(same_bits(absmax, fixture["randn_bf16_bs64.absmax"]));
}

TEST(Blockwise8bit, RejectsBadArguments) {
  const auto code = dynamic_map(true);
  const auto A = at::randn({100});
  EXPECT_THROW(quantize_blockwise(A.to(at::kDouble), code, 64), Error);
  EXPECT_THROW(quantize_blockwise(A, code.narrow(0, 0, 255), 64), Error);
  EXPECT_THROW(quantize_blockwise(A, code, 0), Error);
  auto codes = at::empty({100}, at::TensorOptions().dtype(at::kByte));
  auto short_absmax = at::empty({1}, at::TensorOptions().dtype(at::kFloat));
  EXPECT_THROW(quantize_blockwise_into(A, code, 64, codes, short_absmax), Error);
  const auto q = quantize_blockwise(A, code, 64);
  EXPECT_THROW(dequantize_blockwise(q.codes, q.absmax.narrow(0, 0, 1), code, 64, at::kFloat), Error);
}

// The CUDA kernel computes the CPU kernel's arithmetic: same bytes for every fixture case and for
// a large random bf16 tensor.
TEST(Blockwise8bitCuda, QuantizeEqualsCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto cases = load_json_fixture("quant", "blockwise_8bit.json");
  const TensorFixture fixture("quant", "blockwise_8bit.safetensors");
  for (const auto& [name, spec] : cases.items()) {
    SCOPED_TRACE(name);
    const int64_t blocksize = spec.at("blocksize").get<int64_t>();
    const auto code = dynamic_map(spec.at("signed").get<bool>());
    const auto q = quantize_blockwise(fixture[name + ".A"].cuda(), code, blocksize);
    EXPECT_TRUE(q.codes.is_cuda());
    EXPECT_TRUE(same_bits(q.codes, fixture[name + ".codes"]));
    EXPECT_TRUE(same_bits(q.absmax, fixture[name + ".absmax"]));
    EXPECT_TRUE(same_bits(dequantize_blockwise(q.codes, q.absmax, code, blocksize, at::kBFloat16),
                          fixture[name + ".dequant.bfloat16"]));
  }
  const auto A = at::randn({1 << 20}, at::TensorOptions().dtype(at::kBFloat16));
  for (const int64_t blocksize : {64, 256, 2048}) {
    const auto cpu = quantize_blockwise(A, dynamic_map(true), blocksize);
    const auto gpu = quantize_blockwise(A.cuda(), dynamic_map(true), blocksize);
    EXPECT_TRUE(same_bits(gpu.codes, cpu.codes)) << blocksize;
    EXPECT_TRUE(same_bits(gpu.absmax, cpu.absmax)) << blocksize;
  }
}

}  // namespace
}  // namespace finetune
