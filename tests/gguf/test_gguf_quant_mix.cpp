// llama-quantize's per-tensor types (gguf_quant_mix.h) for a 16-layer model with 256-multiple
// rows, and the fallbacks for rows that are not (the tiny e2e models), as llama-quant.cpp's
// llama_tensor_get_type chooses them; tests/e2e/test_gguf.py compares whole files with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "finetune/gguf/gguf_quant_mix.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

std::vector<std::string> model_names(int layers, bool tied) {
  std::vector<std::string> names = {"token_embd.weight", "output_norm.weight"};
  if (!tied) names.push_back("output.weight");
  for (int i = 0; i < layers; ++i) {
    for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_norm"}) {
      names.push_back("blk." + std::to_string(i) + "." + t + ".weight");
    }
  }
  std::sort(names.begin(), names.end(), gguf_quantizer_order);
  return names;
}

// name -> type for every 2-D tensor (rows of `row_length`), in the quantizer's order.
std::vector<std::pair<std::string, GgmlType>> types_of(const std::string& mix_name, int layers, bool tied,
                                                       int64_t row_length) {
  const auto mix = *gguf_quant_mix(mix_name);
  const auto names = model_names(layers, tied);
  auto state = gguf_mix_state(names, layers, 0, false);
  std::vector<std::pair<std::string, GgmlType>> out;
  for (const auto& name : names) {
    const bool norm = name.find("_norm") != std::string::npos;
    out.emplace_back(name, gguf_mix_tensor_type(mix, state, name, norm ? 1 : row_length, norm ? 1 : 2,
                                                norm ? GgmlType::kF32 : GgmlType::kF16));
  }
  return out;
}

GgmlType type_of(const std::vector<std::pair<std::string, GgmlType>>& types, const std::string& name) {
  for (const auto& [n, t] : types) {
    if (n == name) return t;
  }
  ADD_FAILURE() << name;
  return GgmlType::kF32;
}

TEST(GgufQuantMix, OrderIsNonLayerByNameThenLayers) {
  const auto names = model_names(11, false);
  EXPECT_EQ(names[0], "output.weight");
  EXPECT_EQ(names[1], "output_norm.weight");
  EXPECT_EQ(names[2], "token_embd.weight");
  EXPECT_EQ(names[3], "blk.0.attn_k.weight");
  EXPECT_EQ(names.back(), "blk.10.ffn_up.weight");  // 10 after 9, numerically
}

// Phi-3's fused attn_qkv is an attn_v to the quantizer (category_is_attn_v): counted with them and
// given Q6_K on the use_more_bits layers (llama_model_quantize's output on the tiny Phi-3 model:
// tests/e2e/test_gguf_families.py).
TEST(GgufQuantMix, FusedQkvIsTreatedAsAttentionV) {
  std::vector<std::string> names = {"token_embd.weight", "output.weight"};
  for (int i = 0; i < 16; ++i) {
    for (const char* t : {"attn_qkv", "attn_output", "ffn_up", "ffn_down"}) {
      names.push_back("blk." + std::to_string(i) + "." + t + ".weight");
    }
  }
  std::sort(names.begin(), names.end(), gguf_quantizer_order);
  const auto mix = *gguf_quant_mix("q4_k_m");
  auto state = gguf_mix_state(names, 16, 0, false);
  EXPECT_EQ(state.n_attention_wv, 16);
  for (const auto& name : names) {
    const auto type = gguf_mix_tensor_type(mix, state, name, 256, 2, GgmlType::kF16);
    if (name == "blk.0.attn_qkv.weight" || name == "blk.15.attn_qkv.weight") EXPECT_EQ(type, GgmlType::kQ6_K) << name;
    if (name == "blk.3.attn_qkv.weight") EXPECT_EQ(type, GgmlType::kQ4_K) << name;  // use_more_bits(3, 16) is false
  }
}

TEST(GgufQuantMix, Q4_K_MUsesMoreBitsOnSomeLayers) {
  const auto types = types_of("q4_k_m", 16, false, 4096);
  EXPECT_EQ(type_of(types, "output.weight"), GgmlType::kQ6_K);
  EXPECT_EQ(type_of(types, "token_embd.weight"), GgmlType::kQ4_K);
  EXPECT_EQ(type_of(types, "output_norm.weight"), GgmlType::kF32);
  // use_more_bits(i, 16): i < 2, i >= 14, (i - 2) % 3 == 2
  for (int i = 0; i < 16; ++i) {
    const bool more = i < 2 || i >= 14 || (i - 2) % 3 == 2;
    const auto expected = more ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    const auto layer = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(type_of(types, layer + "attn_v.weight"), expected) << i;
    EXPECT_EQ(type_of(types, layer + "ffn_down.weight"), expected) << i;
    EXPECT_EQ(type_of(types, layer + "attn_q.weight"), GgmlType::kQ4_K) << i;
    EXPECT_EQ(type_of(types, layer + "attn_norm.weight"), GgmlType::kF32) << i;
  }
}

TEST(GgufQuantMix, TiedEmbeddingsTakeTheOutputType) {
  EXPECT_EQ(type_of(types_of("q4_0", 2, true, 4096), "token_embd.weight"), GgmlType::kQ6_K);
  EXPECT_EQ(type_of(types_of("q4_0", 2, false, 4096), "token_embd.weight"), GgmlType::kQ4_0);
  EXPECT_EQ(type_of(types_of("q5_0", 2, false, 4096), "blk.1.ffn_down.weight"), GgmlType::kQ5_0);
  EXPECT_EQ(type_of(types_of("q6_k", 2, false, 4096), "blk.1.ffn_down.weight"), GgmlType::kQ6_K);
}

TEST(GgufQuantMix, RowsNotMultipleOf256FallBack) {
  const auto q4 = types_of("q4_k_m", 2, false, 64);
  EXPECT_EQ(type_of(q4, "output.weight"), GgmlType::kQ8_0);
  EXPECT_EQ(type_of(q4, "blk.0.attn_q.weight"), GgmlType::kQ5_0);
  EXPECT_EQ(type_of(q4, "blk.0.attn_v.weight"), GgmlType::kQ5_0);  // use_more_bits(0, 2) is false
  EXPECT_EQ(type_of(q4, "blk.1.attn_v.weight"), GgmlType::kQ8_0);  // use_more_bits(1, 2): Q6_K -> Q8_0
  EXPECT_EQ(type_of(types_of("q5_k_m", 2, false, 64), "blk.0.attn_q.weight"), GgmlType::kQ5_1);
  EXPECT_EQ(type_of(types_of("q4_0", 2, false, 64), "output.weight"), GgmlType::kQ8_0);  // Q6_K -> Q8_0
  EXPECT_THROW(types_of("q6_k", 2, false, 48), Error);    // output.weight: Q8_0 has no fallback
  EXPECT_THROW(types_of("q4_0", 2, false, 48), Error);  // llama.cpp has no fallback for Q4_0

}

TEST(GgufQuantMix, SeventyBModelsGetQ5_KAttnV) {
  const auto mix = *gguf_quant_mix("q4_k_m");
  const auto names = model_names(80, false);
  auto state = gguf_mix_state(names, 80, 0, gguf_is_70b("llama", 80, 64, 8, 0));
  std::vector<GgmlType> attn_v;
  for (const auto& name : names) {
    const auto type = gguf_mix_tensor_type(mix, state, name, 8192, name.find("_norm") != std::string::npos ? 1 : 2,
                                           GgmlType::kF16);
    if (name.find("attn_v") != std::string::npos) attn_v.push_back(type);
  }
  ASSERT_EQ(attn_v.size(), 80u);
  EXPECT_EQ(attn_v[0], GgmlType::kQ6_K);   // use_more_bits(0, 80)
  EXPECT_EQ(attn_v[10], GgmlType::kQ5_K);  // (10 - 10) % 3 == 0: not more bits, Q4_K -> Q5_K
  EXPECT_FALSE(gguf_is_70b("llama", 80, 64, 64, 0));  // MHA: LLM_TYPE_65B
  EXPECT_TRUE(gguf_is_70b("qwen2", 80, 64, 8, 0));
  EXPECT_FALSE(gguf_is_70b("qwen3", 80, 64, 8, 0));
}

// An 8-expert model (Mixtral-8x7B's count): attn_v and attn_k Q8_0 in every mix, Q4_K_M's
// attn_output Q5_K; the experts' ffn_down_exps take use_more_bits by their layer; the router is
// never quantized; 8 experts never make a "llama" 70B.
TEST(GgufQuantMix, EightExpertRules) {
  std::vector<std::string> names = {"token_embd.weight", "output.weight"};
  for (int i = 0; i < 3; ++i) {
    for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_exps", "ffn_up_exps",
                          "ffn_down_exps", "ffn_gate_inp"}) {
      names.push_back("blk." + std::to_string(i) + "." + t + ".weight");
    }
  }
  std::sort(names.begin(), names.end(), gguf_quantizer_order);
  for (const char* mix_name : {"q4_0", "q6_k", "q4_k_m", "q5_k_m"}) {
    const auto mix = *gguf_quant_mix(mix_name);
    auto state = gguf_mix_state(names, 3, 8, false);
    for (const auto& name : names) {
      const auto type = gguf_mix_tensor_type(mix, state, name, 256, name.find("exps") != std::string::npos ? 3 : 2,
                                             name.find("gate_inp") != std::string::npos ? GgmlType::kF32 : GgmlType::kF16);
      const std::string what = std::string(mix_name) + " " + name;
      if (name.find("attn_v") != std::string::npos || name.find("attn_k") != std::string::npos) {
        EXPECT_EQ(type, GgmlType::kQ8_0) << what;
      }
      if (name.find("gate_inp") != std::string::npos) {
        EXPECT_EQ(type, GgmlType::kF32) << what;
      }
      if (name.find("attn_output") != std::string::npos) {
        EXPECT_EQ(type, mix.file_type == 15 ? GgmlType::kQ5_K : mix.default_type) << what;
      }
      if (name.find("ffn_down_exps") != std::string::npos && (mix.file_type == 15 || mix.file_type == 17)) {
        // use_more_bits(i, 3) picks layer 2 only
        EXPECT_EQ(type, name == "blk.2.ffn_down_exps.weight" ? GgmlType::kQ6_K : mix.default_type) << what;
      }
    }
  }
  EXPECT_FALSE(gguf_is_70b("llama", 80, 64, 8, 8));  // Mixtral's shape: an 8x model, not 70B
  EXPECT_TRUE(gguf_is_70b("llama", 80, 64, 8, 4));
}

TEST(GgufQuantMix, NamesAndFileTypes) {
  EXPECT_EQ(gguf_quant_mix("q4_k_m")->label, "Q4_K_M");
  EXPECT_EQ(gguf_quant_mix("q4_k_m")->file_type, 15u);
  EXPECT_EQ(gguf_quant_mix("q5_k_m")->file_type, 17u);
  EXPECT_EQ(gguf_quant_mix("q6_k")->file_type, 18u);
  EXPECT_EQ(gguf_quant_mix("q4_0")->file_type, 2u);
  EXPECT_EQ(gguf_quant_mix("q5_0")->file_type, 8u);
  EXPECT_FALSE(gguf_quant_mix("q8_0"));
}

}  // namespace
}  // namespace finetune
