// quant/nf4.h against bitsandbytes 0.50.2 and transformers (tests/reference/make_quant_fixtures.py):
// quantize_4bit / Linear4bit on the CPU, a tiny Llama loaded in 4 bits, and on a GPU the CUDA path.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include <ATen/ATen.h>

#include "../reference/tensor_fixtures.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/quant/blockwise_8bit.h"
#include "finetune/quant/nf4.h"
#include "finetune/quant/nf4_state_dict.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using reference::fixture_path;
using reference::load_json_fixture;
using reference::same_bits;
using reference::TensorFixture;

const std::pair<const char*, at::ScalarType> kDtypes[] = {
    {"float32", at::kFloat}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}};

const std::string kQuantStateNf4 = ".quant_state.bitsandbytes__nf4";

// Our saved tensors for `w` equal bitsandbytes' "<weight_name>*" tensors in `expected`: the same
// names (no more, no fewer), dtypes, shapes and bytes.
void expect_saved_as(const Nf4Weight& w, const std::string& weight_name,
                     const std::map<std::string, at::Tensor>& expected) {
  std::set<std::string> ours;
  for (const auto& [suffix, tensor] : nf4_state_dict(w)) {
    const std::string name = weight_name + suffix;
    ours.insert(name);
    const auto it = expected.find(name);
    if (it == expected.end()) {
      ADD_FAILURE() << "bitsandbytes saves no " << name;
      continue;
    }
    EXPECT_TRUE(same_bits(tensor, it->second)) << name;
  }
  for (const auto& [name, tensor] : expected) {
    const bool of_this_weight = name == weight_name || name.rfind(weight_name + ".", 0) == 0;
    if (of_this_weight && name.find(".dequant") == std::string::npos) {
      EXPECT_TRUE(ours.count(name)) << "we do not save " << name;
    }
  }
}

QuantType4bit type_of(const nlohmann::json& spec) {
  return parse_quant_type(spec.at("quant_type").get<std::string>(), "nf4.json");
}

TEST(Nf4, QuantMapsAreBitsandbytes) {
  const TensorFixture fixture("quant", "nf4.safetensors");
  EXPECT_TRUE(same_bits(quant_map_4bit(QuantType4bit::NF4), fixture["bf16_64x64.weight.quant_map"]));
  EXPECT_TRUE(same_bits(quant_map_4bit(QuantType4bit::FP4), fixture["fp4_bf16_64x192.weight.quant_map"]));
}

// Packed codes and every statistic, as Linear4bit.state_dict() (or QuantState.as_dict) saves them.
TEST(Nf4, QuantizeIsBitsandbytesOnCpu) {
  const auto cases = load_json_fixture("quant", "nf4.json");
  const TensorFixture fixture("quant", "nf4.safetensors");
  ASSERT_GE(cases.size(), 15u);
  for (const auto& [name, spec] : cases.items()) {
    SCOPED_TRACE(name);
    const auto w = quantize_nf4(fixture[name + ".input"], spec.at("compress_statistics").get<bool>(),
                                spec.at("blocksize").get<int64_t>(), type_of(spec));
    expect_saved_as(w, name + ".weight", fixture.tensors());
  }
}

TEST(Nf4, DequantizeIsBitsandbytes) {
  const auto cases = load_json_fixture("quant", "nf4.json");
  const TensorFixture fixture("quant", "nf4.safetensors");
  for (const auto& [name, spec] : cases.items()) {
    SCOPED_TRACE(name);
    const auto& input = fixture[name + ".input"];
    const auto w = quantize_nf4(input, spec.at("compress_statistics").get<bool>(), spec.at("blocksize").get<int64_t>(),
                                type_of(spec));
    EXPECT_TRUE(same_bits(dequantize_nf4(w, input.scalar_type()), fixture[name + ".dequant"].view(input.sizes())));
    for (const auto& [dtype_name, dtype] : kDtypes) {
      EXPECT_TRUE(same_bits(dequantize_nf4(w, dtype), fixture[name + ".dequant." + dtype_name].view(input.sizes()))) << dtype_name;
    }
  }
}

TEST(Nf4, DequantizeIntoFillsTheCallersBuffer) {
  const TensorFixture fixture("quant", "nf4.safetensors");
  const auto w = quantize_nf4(fixture["bf16_256x512.input"]);
  auto out = at::full({256, 512}, 5.0, at::TensorOptions().dtype(at::kBFloat16));
  const auto* storage = out.data_ptr();
  dequantize_nf4_into(w, out);
  EXPECT_EQ(out.data_ptr(), storage);
  EXPECT_TRUE(same_bits(out, fixture["bf16_256x512.dequant"]));
  auto wrong_shape = at::empty({512, 256}, at::TensorOptions().dtype(at::kBFloat16));
  EXPECT_THROW(dequantize_nf4_into(w, wrong_shape), Error);
  auto wrong_dtype = at::empty({256, 512}, at::TensorOptions().dtype(at::kDouble));
  EXPECT_THROW(dequantize_nf4_into(w, wrong_dtype), Error);
  auto strided = at::empty({512, 256}, at::TensorOptions().dtype(at::kBFloat16)).t();
  EXPECT_THROW(dequantize_nf4_into(w, strided), Error);
}

TEST(Nf4, BatchDequantizeIntoIsOneDequantizeIntoPerWeight) {
  at::manual_seed(0);
  const auto first = quantize_nf4(at::randn({32, 64}, at::TensorOptions().dtype(at::kBFloat16)));
  const auto second = quantize_nf4(at::randn({7, 9}), false, 32, QuantType4bit::FP4);
  std::vector<at::Tensor> outs = {at::empty({32, 64}, at::kHalf), at::empty({7, 9}, at::kFloat)};
  dequantize_nf4_batch_into({&first, &second}, outs);
  EXPECT_TRUE(same_bits(outs[0], dequantize_nf4(first, at::kHalf)));
  EXPECT_TRUE(same_bits(outs[1], dequantize_nf4(second, at::kFloat)));
  std::vector<at::Tensor> too_few = {at::empty({32, 64}, at::kHalf)};
  EXPECT_THROW(dequantize_nf4_batch_into({&first, &second}, too_few), Error);
  std::vector<at::Tensor> wrong_shape = {at::empty({64, 32}, at::kHalf)};
  EXPECT_THROW(dequantize_nf4_batch_into({&first}, wrong_shape), Error);
}

TEST(Nf4, WeightDescribesItself) {
  const auto w = quantize_nf4(at::randn({96, 40}, at::TensorOptions().dtype(at::kBFloat16)));
  EXPECT_EQ(w.numel(), 96 * 40);
  EXPECT_EQ(w.blocks(), 60);
  EXPECT_EQ(w.device(), at::Device(at::kCPU));
  EXPECT_EQ(w.dtype, at::kBFloat16);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{96, 40}));
  EXPECT_TRUE(w.nested);
  EXPECT_EQ(w.absmax.scalar_type(), at::kByte);
  EXPECT_EQ(w.nested_absmax.numel(), 1);
  EXPECT_TRUE(same_bits(w.nested_quant_map, dynamic_map(true)));
  const auto moved = w.to(at::kCPU);
  EXPECT_TRUE(same_bits(dequantize_nf4(moved, at::kFloat), dequantize_nf4(w, at::kFloat)));
}

TEST(Nf4, RejectsBadArguments) {
  const auto weight = at::randn({64, 64});
  EXPECT_THROW(quantize_nf4(weight.to(at::kDouble)), Error);
  EXPECT_THROW(quantize_nf4(weight, true, 48), Error);
  EXPECT_THROW(quantize_nf4(weight, true, 8192), Error);
  EXPECT_THROW(parse_quant_type("int4", "test"), Error);
  auto w = quantize_nf4(weight);
  w.nested_absmax = w.nested_absmax.narrow(0, 0, 0);
  EXPECT_THROW(dequantize_nf4(w, at::kFloat), Error);
}

// AutoModelForCausalLM.from_pretrained(..., BitsAndBytesConfig(load_in_4bit=True, nf4, double
// quant)) on the CPU: each Linear4bit holds what quantize_nf4 makes of the checkpoint's weight.
TEST(Nf4, EqualsTransformersLoadIn4bit) {
  const auto base = load_tensors(fixture_path("quant", "transformers/base/model.safetensors"));
  const TensorFixture state("quant", "transformers/state.safetensors");
  int weights = 0;
  for (const auto& [name, tensor] : state.tensors()) {
    if (name.size() <= kQuantStateNf4.size() || name.substr(name.size() - kQuantStateNf4.size()) != kQuantStateNf4) {
      continue;
    }
    const std::string weight_name = name.substr(0, name.size() - kQuantStateNf4.size());
    SCOPED_TRACE(weight_name);
    const auto w = quantize_nf4(base.at(weight_name));
    expect_saved_as(w, weight_name, state.tensors());
    EXPECT_TRUE(same_bits(dequantize_nf4(w, at::kBFloat16), state[weight_name + ".dequant"]));
    ++weights;
  }
  EXPECT_EQ(weights, 2 * 7);  // two layers of q, k, v, o, gate, up, down
}

// ---- CUDA: bitsandbytes' CUDA kernels (Note [bitsandbytes' CPU and CUDA 4-bit quantizers]).

// kQuantizeBlockwise's code for a scaled value (dQuantize), on the CPU, for checking our kernel's
// nested statistics: the even pivot its halving search ends on, then the nearer neighbour.
uint8_t cuda_search_code(const float* code, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f, value = code[pivot];
  for (int step = 64; step > 0; step >>= 1) {
    if (x > value) {
      lower_pivot = pivot;
      lower = value;
      pivot += step;
    } else {
      upper_pivot = pivot;
      upper = value;
      pivot -= step;
    }
    value = code[pivot];
  }
  if (upper_pivot == 255) upper = code[255];
  if (lower_pivot == 0) lower = code[0];
  if (x > value) return static_cast<uint8_t>(x > (upper + value) * 0.5f ? upper_pivot : pivot);
  return static_cast<uint8_t>(x < (lower + value) * 0.5f ? lower_pivot : pivot);
}

TEST(Nf4Cuda, QuantizeEqualsCpuOnRandomBf16Weights) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(0);
  const auto weight = (0.02 * at::randn({1024, 4096})).to(at::kBFloat16);
  const auto cpu = quantize_nf4(weight, /*compress_statistics=*/false);
  const auto gpu = quantize_nf4(weight.cuda(), /*compress_statistics=*/false);
  EXPECT_TRUE(gpu.packed.is_cuda());
  EXPECT_TRUE(same_bits(gpu.packed, cpu.packed));
  EXPECT_TRUE(same_bits(gpu.absmax, cpu.absmax));

  // Double quantization: the same packed codes; the offset is torch's CUDA mean; the nested codes
  // follow kQuantizeBlockwise's search (the CPU table would differ in a few).
  const auto nested = quantize_nf4(weight.cuda());
  EXPECT_TRUE(same_bits(nested.packed, cpu.packed));
  const auto offset = cpu.absmax.cuda().mean();
  EXPECT_TRUE(same_bits(nested.offset, offset));
  const auto centered = (cpu.absmax.cuda() - offset).cpu();  // (65536,): 256 full blocks of 256
  const auto code = dynamic_map(true);
  const auto codes = nested.absmax.cpu();
  auto expected_absmax = at::empty({centered.numel() / 256}, at::TensorOptions().dtype(at::kFloat));
  int64_t off_by_reciprocal = 0;
  for (int64_t b = 0; b < expected_absmax.numel(); ++b) {
    const auto block = centered.narrow(0, b * 256, 256);
    const float absmax = block.abs().max().item<float>();
    expected_absmax.data_ptr<float>()[b] = absmax;
    // The kernel scales by rcp.approx(absmax), within an ulp of 1 / absmax: its code must be the
    // search's for one of the three candidates (how often not the correctly rounded one's is recorded).
    const float inverse = 1.0f / absmax;
    const float candidates[] = {inverse, std::nextafter(inverse, 0.0f), std::nextafter(inverse, 2.0f * inverse)};
    for (int64_t i = 0; i < 256; ++i) {
      const float x = block.data_ptr<float>()[i];
      const uint8_t got = codes.data_ptr<uint8_t>()[b * 256 + i];
      bool matched = false;
      for (const float candidate : candidates) matched |= cuda_search_code(code.data_ptr<float>(), x * candidate) == got;
      EXPECT_TRUE(matched) << "nested code " << b * 256 + i;
      off_by_reciprocal += got != cuda_search_code(code.data_ptr<float>(), x * inverse);
    }
  }
  RecordProperty("nested_codes_moved_by_rcp_approx", static_cast<int>(off_by_reciprocal));
  EXPECT_TRUE(same_bits(nested.nested_absmax, expected_absmax));
  EXPECT_TRUE(same_bits(dequantize_nf4(nested, at::kBFloat16), dequantize_nf4(nested.to(at::kCPU), at::kBFloat16)));
}

// Dequantization on the GPU, bit for bit the CPU's, for every fixture weight (all dtypes), from
// statistics made on the CPU. Left out: fp32_tiny, whose subnormal products flush to zero on the
// GPU (as in bitsandbytes' kernels), and fp4_fp32_plain, whose odd last dimension sends
// bitsandbytes' CPU to its torch fallback, decoding FP4's code 8 as +0.0 instead of -0.0.
TEST(Nf4Cuda, DequantizeEqualsCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto cases = load_json_fixture("quant", "nf4.json");
  const TensorFixture fixture("quant", "nf4.safetensors");
  for (const auto& [name, spec] : cases.items()) {
    if (name == "fp32_tiny" || name == "fp4_fp32_plain") continue;
    SCOPED_TRACE(name);
    const auto cpu = quantize_nf4(fixture[name + ".input"], spec.at("compress_statistics").get<bool>(),
                                  spec.at("blocksize").get<int64_t>(), type_of(spec));
    const auto gpu = cpu.to(at::Device(at::kCUDA, 0));
    for (const auto& [dtype_name, dtype] : kDtypes) {
      const auto out = dequantize_nf4(gpu, dtype);
      EXPECT_TRUE(out.is_cuda());
      auto expected = fixture[name + ".dequant." + dtype_name].view(out.sizes());
      auto got = out.cpu();
      if (name == "fp32_nan") {
        // A NaN block is NaN on both, but the GPU's NaN is the canonical one, not the CPU's -nan:
        // the same positions are NaN and every other element has the same bits.
        const auto nan = expected.isnan();
        EXPECT_TRUE(at::equal(got.isnan(), nan)) << dtype_name;
        EXPECT_GT(nan.sum().item<int64_t>(), 0);
        got = got.masked_fill(nan, 0);
        expected = expected.masked_fill(nan, 0);
      }
      EXPECT_TRUE(same_bits(got, expected)) << dtype_name;
    }
  }
}

// bitsandbytes' own CUDA kernels (the generator's cuda/ fixtures, written when its torch has CUDA).
TEST(Nf4Cuda, QuantizeIsBitsandbytesOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto cases = load_json_fixture("quant", "cuda/nf4.json");
  const TensorFixture fixture("quant", "cuda/nf4.safetensors");
  for (const auto& [name, spec] : cases.items()) {
    SCOPED_TRACE(name);
    const auto w = quantize_nf4(fixture[name + ".input"].cuda(), spec.at("compress_statistics").get<bool>(),
                                spec.at("blocksize").get<int64_t>(), type_of(spec));
    expect_saved_as(w, name + ".weight", fixture.tensors());
    EXPECT_TRUE(same_bits(dequantize_nf4(w, w.dtype), fixture[name + ".dequant"].view(at::IntArrayRef(w.shape))));
  }
}

}  // namespace
}  // namespace finetune
