// quant/nf4_state_dict.h: bitsandbytes' saved 4-bit layout, against Linear4bit.state_dict() and
// transformers' save_pretrained of a 4-bit model (tests/reference/make_quant_fixtures.py).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <ATen/ATen.h>

#include "../reference/tensor_fixtures.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/quant/nf4.h"
#include "finetune/quant/nf4_state_dict.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using reference::fixture_path;
using reference::load_json_fixture;
using reference::same_bits;
using reference::TensorFixture;

TensorLookup lookup_in(const std::map<std::string, at::Tensor>& tensors) {
  return [&tensors](const std::string& name) {
    const auto it = tensors.find(name);
    return it == tensors.end() ? at::Tensor() : it->second;
  };
}

at::Tensor bytes_of(const std::string& text) {
  auto t = at::empty({static_cast<int64_t>(text.size())}, at::TensorOptions().dtype(at::kByte));
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(t.data_ptr<uint8_t>()));
  return t;
}

std::string text_of(const at::Tensor& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), bytes.numel());
}

// A state dict produced by bitsandbytes reads into our weight and writes back byte for byte.
TEST(Nf4StateDict, BitsandbytesStateDictsRoundTrip) {
  const auto cases = load_json_fixture("quant", "nf4.json");
  const TensorFixture fixture("quant", "nf4.safetensors");
  for (const auto& [name, spec] : cases.items()) {
    SCOPED_TRACE(name);
    const std::string weight_name = name + ".weight";
    const auto w = nf4_from_state_dict(weight_name, lookup_in(fixture.tensors()));
    EXPECT_EQ(w.nested, spec.at("compress_statistics").get<bool>());
    EXPECT_EQ(w.blocksize, spec.at("blocksize").get<int64_t>());
    EXPECT_EQ(quant_type_name(w.quant_type), spec.at("quant_type").get<std::string>());
    EXPECT_EQ(w.dtype, fixture[name + ".input"].scalar_type());
    EXPECT_EQ(at::IntArrayRef(w.shape), fixture[name + ".input"].sizes());
    int tensors = 0;
    for (const auto& [suffix, tensor] : nf4_state_dict(w)) {
      EXPECT_TRUE(same_bits(tensor, fixture[weight_name + suffix])) << suffix;
      ++tensors;
    }
    EXPECT_EQ(tensors, w.nested ? 6 : 4);
    EXPECT_TRUE(same_bits(dequantize_nf4(w, w.dtype), fixture[name + ".dequant"].view(at::IntArrayRef(w.shape))));
  }
}

// save_pretrained of the 4-bit model transformers loaded: every quantized weight parses and
// dequantizes as bitsandbytes did, and our saved set is the file's.
TEST(Nf4StateDict, ParsesTransformersSavePretrained) {
  const auto saved = load_tensors(fixture_path("quant", "transformers/saved/model.safetensors"));
  const TensorFixture state("quant", "transformers/state.safetensors");
  const auto lookup = lookup_in(saved);
  int weights = 0;
  for (const auto& [name, tensor] : saved) {
    const auto dot = name.rfind(".weight");
    if (dot == std::string::npos || dot + 7 != name.size()) continue;
    const auto type = saved_quant_type(name, lookup);
    if (!type) continue;  // embeddings, norms, lm_head stay unquantized
    SCOPED_TRACE(name);
    EXPECT_EQ(*type, QuantType4bit::NF4);
    const auto w = nf4_from_state_dict(name, lookup);
    EXPECT_TRUE(same_bits(dequantize_nf4(w, at::kBFloat16), state[name + ".dequant"]));
    for (const auto& [suffix, t] : nf4_state_dict(w)) EXPECT_TRUE(same_bits(t, saved.at(name + suffix))) << suffix;
    ++weights;
  }
  EXPECT_EQ(weights, 2 * 7);
  EXPECT_FALSE(saved_quant_type("model.embed_tokens.weight", lookup).has_value());
}

// json.dumps of QuantState.as_dict's items: Python's key order and separators, repr of the offset.
TEST(Nf4StateDict, QuantStateJsonIsPythons) {
  auto w = quantize_nf4(at::randn({64, 64}, at::TensorOptions().dtype(at::kBFloat16)));
  const std::pair<float, const char*> offsets[] = {
      {1e-5f, "9.999999747378752e-06"},   {0.5f, "0.5"},
      {3.0f, "3.0"},                      {1e20f, "1.0000000200408773e+20"},
      {123456.0f, "123456.0"},            {1e-4f, "9.999999747378752e-05"},
      {1e-3f, "0.0010000000474974513"},   {1e16f, "1.0000000272564224e+16"},
      {1e17f, "9.999999843067494e+16"},   {-2.5e-7f, "-2.499999993688107e-07"},
      {0.0f, "0.0"},                      {0.0526885986328125f, "0.0526885986328125"},
      {65536.0f, "65536.0"},              {0x1p-13f, "0.0001220703125"},
      {0x1p-14f, "6.103515625e-05"},      {1e15f, "999999986991104.0"},
      {0x1p53f, "9007199254740992.0"},    {0x1p54f, "1.8014398509481984e+16"},
  };
  for (const auto& [offset, text] : offsets) {
    w.offset = at::scalar_tensor(offset, at::TensorOptions().dtype(at::kFloat));
    EXPECT_EQ(quant_state_json(w), std::string("{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", "
                                               "\"shape\": [64, 64], \"nested_blocksize\": 256, \"nested_dtype\": "
                                               "\"float32\", \"nested_offset\": ") +
                                       text + "}");
  }
  const auto plain = quantize_nf4(at::randn({3, 5, 64}), false, 128, QuantType4bit::FP4);
  EXPECT_EQ(quant_state_json(plain), "{\"quant_type\": \"fp4\", \"blocksize\": 128, \"dtype\": \"float32\", "
                                     "\"shape\": [3, 5, 64]}");
}

class Nf4StateDictErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto w = quantize_nf4(at::randn({32, 64}, at::TensorOptions().dtype(at::kBFloat16)));
    for (const auto& [suffix, t] : nf4_state_dict(w)) tensors_["layer.weight" + suffix] = t;
  }

  // nf4_from_state_dict's error message, or "" when it accepts the tensors.
  std::string error() {
    try {
      nf4_from_state_dict("layer.weight", lookup_in(tensors_));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::string json() { return text_of(tensors_.at("layer.weight" + kState)); }
  void set_json(const std::string& text) { tensors_["layer.weight" + kState] = bytes_of(text); }
  void replace_in_json(const std::string& from, const std::string& to) {
    auto text = json();
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    set_json(text.replace(at, from.size(), to));
  }

  const std::string kState = ".quant_state.bitsandbytes__nf4";
  std::map<std::string, at::Tensor> tensors_;
};

TEST_F(Nf4StateDictErrors, AcceptsTheUntouchedSet) { EXPECT_EQ(error(), ""); }

TEST_F(Nf4StateDictErrors, MissingTensorIsNamed) {
  for (const std::string suffix : {"", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"}) {
    SetUp();
    tensors_.erase("layer.weight" + suffix);
    EXPECT_NE(error().find("missing tensor layer.weight" + suffix), std::string::npos) << suffix << ": " << error();
  }
  SetUp();
  tensors_.erase("layer.weight" + kState);
  EXPECT_NE(error().find("missing tensor layer.weight" + kState), std::string::npos) << error();
}

TEST_F(Nf4StateDictErrors, WrongDtypeOrShapeIsNamed) {
  tensors_["layer.weight.absmax"] = tensors_["layer.weight.absmax"].to(at::kFloat);
  EXPECT_NE(error().find("tensor layer.weight.absmax: expected dtype"), std::string::npos) << error();
  SetUp();
  tensors_["layer.weight"] = tensors_["layer.weight"].reshape({1, -1});
  EXPECT_NE(error().find("tensor layer.weight: expected shape [1024, 1]"), std::string::npos) << error();
  SetUp();
  tensors_["layer.weight.nested_absmax"] = at::zeros({2});
  EXPECT_NE(error().find("tensor layer.weight.nested_absmax: expected shape [1]"), std::string::npos) << error();
  SetUp();
  tensors_["layer.weight.quant_map"] = tensors_["layer.weight.quant_map"] * 2;
  EXPECT_NE(error().find("layer.weight.quant_map: differs"), std::string::npos) << error();
}

TEST_F(Nf4StateDictErrors, BadQuantStateIsNamed) {
  const std::string state = "tensor layer.weight" + kState;
  replace_in_json("\"shape\": [32, 64]", "\"shape\": [64, 64]");  // 4096 elements, 1024 packed bytes
  EXPECT_NE(error().find("tensor layer.weight: expected shape [2048, 1]"), std::string::npos) << error();
  SetUp();
  replace_in_json("\"quant_type\": \"nf4\"", "\"quant_type\": \"fp4\"");
  EXPECT_NE(error().find(state + ": quant_type \"fp4\" does not match"), std::string::npos) << error();
  SetUp();
  replace_in_json("\"quant_type\": \"nf4\"", "\"quant_type\": \"int4\"");
  EXPECT_NE(error().find(state + ": quant_type must be"), std::string::npos) << error();
  SetUp();
  replace_in_json("\"blocksize\": 64", "\"blocksize\": 48");
  EXPECT_NE(error().find(state + ": blocksize must be one of"), std::string::npos) << error();
  SetUp();
  replace_in_json("\"dtype\": \"bfloat16\"", "\"dtype\": \"int8\"");
  EXPECT_NE(error().find(state + " \"dtype\": expected"), std::string::npos) << error();
  SetUp();
  replace_in_json("\"nested_dtype\": \"float32\", ", "");
  EXPECT_NE(error().find(state + ": quant_state needs all of"), std::string::npos) << error();
  SetUp();
  replace_in_json("{", "{\"surprise\": 1, ");
  EXPECT_NE(error().find(state + ": unknown quant_state key \"surprise\""), std::string::npos) << error();
  SetUp();
  set_json("{\"quant_type\": \"nf4\"");
  EXPECT_NE(error().find(state + ": invalid JSON"), std::string::npos) << error();
  SetUp();
  replace_in_json("\"blocksize\": 64", "\"blocksize\": \"64\"");
  EXPECT_NE(error().find(state + ": \"blocksize\" must be an integer"), std::string::npos) << error();
}

TEST_F(Nf4StateDictErrors, NestedTensorsWithoutNestedKeysAreRefused) {
  auto text = json();
  text = text.substr(0, text.find(", \"nested_blocksize\"")) + "}";
  set_json(text);
  EXPECT_NE(error().find("layer.weight.nested_absmax: present"), std::string::npos) << error();
}

TEST_F(Nf4StateDictErrors, BothQuantTypesIsAnError) {
  tensors_["layer.weight.quant_state.bitsandbytes__fp4"] = tensors_.at("layer.weight" + kState);
  EXPECT_NE(error().find("both"), std::string::npos) << error();
}

}  // namespace
}  // namespace finetune
