// GGUF bytes against llama.cpp's gguf-py (tests/reference/make_gguf_encoding_fixtures.py wrote
// gguf_expected.inc): Q8_0 / F16 / BF16 encodings of edge values (zeros, ties, subnormals,
// overflow to inf, NaN payloads for BF16), the converter's q/k permutation, and a whole small
// file (KV types, tensor infos, alignment) byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../test_support.h"
#include "finetune/gguf/gguf_file_writer.h"
#include "finetune/gguf/gguf_quantize.h"
#include "finetune/gguf/gguf_tensor_names.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

#include "gguf_expected.inc"

template <size_t N>
std::vector<float> floats(const uint32_t (&bits)[N]) {
  std::vector<float> out(N);
  std::memcpy(out.data(), bits, sizeof bits);
  return out;
}

using testing::hex;

TEST(GgufEncoding, Q8_0MatchesGgufPy) {
  const auto input = floats(kQ8Input);
  const int64_t rows = static_cast<int64_t>(input.size()) / 32;
  EXPECT_EQ(hex(ggml_encode(input.data(), rows, 32, GgmlType::kQ8_0)), kQ8Expected);
  // Two blocks per row give the same bytes: blocks never straddle rows.
  EXPECT_EQ(hex(ggml_encode(input.data(), rows / 2, 64, GgmlType::kQ8_0)), kQ8Expected);
}

TEST(GgufEncoding, F16MatchesNumpy) {
  const auto input = floats(kF16Input);
  EXPECT_EQ(hex(ggml_encode(input.data(), 1, static_cast<int64_t>(input.size()), GgmlType::kF16)), kF16Expected);
}

TEST(GgufEncoding, Bf16MatchesGgufPyIncludingNan) {
  const auto input = floats(kBf16Input);
  EXPECT_EQ(hex(ggml_encode(input.data(), 1, static_cast<int64_t>(input.size()), GgmlType::kBF16)), kBf16Expected);
}

TEST(GgufEncoding, F32IsTheFloats) {
  const float values[] = {1.5f, -0.0f, 3e38f};
  EXPECT_EQ(ggml_encode(values, 1, 3, GgmlType::kF32), std::string(reinterpret_cast<const char*>(values), 12));
}

TEST(GgufEncoding, Q8_0RefusesRowsNotMultipleOf32) {
  const std::vector<float> values(48, 1.0f);
  EXPECT_FALSE(ggml_can_encode(GgmlType::kQ8_0, 48));
  EXPECT_TRUE(ggml_can_encode(GgmlType::kF16, 48));
  EXPECT_THROW(ggml_encode(values.data(), 1, 48, GgmlType::kQ8_0), Error);
}

TEST(GgufEncoding, TypeNamesAndFileTypes) {
  EXPECT_EQ(ggml_type_from_name("q8_0"), GgmlType::kQ8_0);
  EXPECT_EQ(static_cast<uint32_t>(ggml_type_from_name("bf16")), 30u);
  EXPECT_EQ(llama_file_type(GgmlType::kF32), 0u);
  EXPECT_EQ(llama_file_type(GgmlType::kF16), 1u);
  EXPECT_EQ(llama_file_type(GgmlType::kQ8_0), 7u);
  EXPECT_EQ(llama_file_type(GgmlType::kBF16), 32u);
  EXPECT_THROW(ggml_type_from_name("q4_k_m"), UsageError);
}

TEST(GgufEncoding, PermutationMatchesConverter) {
  // LlamaModel.permute(torch.arange(48).reshape(16, 3), 2, 2)[:, 0] and permute(arange(8), 4, 2).
  const auto weight = at::arange(48, at::kLong).reshape({16, 3});
  const auto permuted = gguf_permute_qk(weight, 2).select(1, 0).contiguous();
  const std::vector<int64_t> expected_w = {0, 12, 3, 15, 6, 18, 9, 21, 24, 36, 27, 39, 30, 42, 33, 45};
  EXPECT_EQ(std::vector<int64_t>(permuted.data_ptr<int64_t>(), permuted.data_ptr<int64_t>() + 16), expected_w);
  const auto bias = gguf_permute_qk(at::arange(8, at::kLong), 2);
  const std::vector<int64_t> expected_k = {0, 2, 1, 3, 4, 6, 5, 7};
  EXPECT_EQ(std::vector<int64_t>(bias.data_ptr<int64_t>(), bias.data_ptr<int64_t>() + 8), expected_k);
  EXPECT_THROW(gguf_permute_qk(at::zeros({6, 2}), 2), Error);  // 3 rows per head: no rotary pairs
}

TEST(GgufEncoding, SmallFileMatchesGgufWriter) {
  GgufFileWriter writer;
  writer.add_string("general.architecture", "llama");
  writer.add_uint32("a.u32", 7);
  writer.add_int32("a.i32", -3);
  writer.add_float32("a.f32", 0.5f);
  writer.add_bool("a.b", true);
  writer.add_string("a.s", "h\xc3\xa9llo");
  writer.add_string_array("a.sa", {"x", "yz"});
  writer.add_int32_array("a.ia", {1, -2});
  const float t[] = {1, 2, 3, 4, 5, 6};
  const float n[] = {1.5f};
  const size_t t_index = writer.add_tensor_info("t.weight", {2, 3}, 0, 24);
  const size_t n_index = writer.add_tensor_info("n.weight", {1}, 0, 4);
  EXPECT_THROW(writer.add_uint32("a.u32", 1), Error);
  EXPECT_THROW(writer.add_tensor_info("n.weight", {1}, 0, 4), Error);

  const auto path = (std::filesystem::temp_directory_path() / "finetune_gguf_small_test.gguf").string();
  writer.begin(path);
  EXPECT_THROW(writer.add_uint32("a.late", 1), Error);  // the header is written
  const auto n_bytes = ggml_encode(n, 1, 1, GgmlType::kF32);
  writer.write_tensor_data(n_index, 0, n_bytes.data(), n_bytes.size());  // any order, in pieces
  const auto t_bytes = ggml_encode(t, 2, 3, GgmlType::kF32);
  EXPECT_THROW(writer.finish(), Error);  // t.weight not written yet
  writer.write_tensor_data(t_index, 12, t_bytes.data() + 12, 12);
  EXPECT_THROW(writer.write_tensor_data(t_index, 12, t_bytes.data(), 16), Error);  // past its 24 bytes
  EXPECT_FALSE(std::filesystem::exists(path));
  writer.write_tensor_data(t_index, 0, t_bytes.data(), 12);
  writer.finish();
  std::ifstream file(path, std::ios::binary);
  std::stringstream bytes;
  bytes << file.rdbuf();
  std::filesystem::remove(path);
  EXPECT_EQ(hex(bytes.str()), kSmallFile);
}

TEST(GgufTensorNames, HfToGguf) {
  const Architecture& llama = *find_architecture_by_class("LlamaForCausalLM");
  const Architecture& qwen3 = *find_architecture_by_class("Qwen3ForCausalLM");
  EXPECT_EQ(gguf_tensor_name(llama, "model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name(llama, "model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(gguf_tensor_name(llama, "lm_head.weight"), "output.weight");
  EXPECT_EQ(gguf_tensor_name(llama, "model.layers.0.input_layernorm.weight"), "blk.0.attn_norm.weight");
  EXPECT_EQ(gguf_tensor_name(llama, "model.layers.11.post_attention_layernorm.weight"), "blk.11.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name(llama, "model.layers.2.self_attn.q_proj.bias"), "blk.2.attn_q.bias");
  EXPECT_EQ(gguf_tensor_name(llama, "model.layers.2.self_attn.o_proj.weight"), "blk.2.attn_output.weight");
  EXPECT_EQ(gguf_tensor_name(qwen3, "model.layers.3.self_attn.k_norm.weight"), "blk.3.attn_k_norm.weight");
  EXPECT_EQ(gguf_tensor_name(llama, "model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_THROW(gguf_tensor_name(llama, "model.layers.3.self_attn.k_norm.weight"), Error);  // not in Llama's table
  EXPECT_THROW(gguf_tensor_name(llama, "model.layers.3.mlp.experts.weight"), Error);
  EXPECT_THROW(gguf_tensor_name(llama, "model.layers.3.self_attn.rotary_emb.inv_freq"), Error);
}

}  // namespace
}  // namespace finetune
