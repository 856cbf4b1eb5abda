// What llama.cpp's runtime cannot represent of a Gemma config is refused with the reason; the
// converter's hparams lift a text_config. (The keys themselves are compared with the converter's
// file, order included, in tests/e2e/test_gguf_families.py.)
#include <gtest/gtest.h>

#include "../test_support.h"

#include "finetune/gguf/gguf_model_keys.h"
#include "finetune/io/model_config.h"

namespace finetune {
namespace {

nlohmann::json gemma2_json() {
  return {{"architectures", {"Gemma2ForCausalLM"}}, {"model_type", "gemma2"}, {"vocab_size", 256},
          {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"head_dim", 16}, {"query_pre_attn_scalar", 16}, {"sliding_window", 6},
          {"tie_word_embeddings", true}, {"hidden_activation", "gelu_pytorch_tanh"}};
}

std::string refusal(const nlohmann::json& json, const std::string& arch) {
  const auto config = model_config_from_json(json, "m/config.json");
  return testing::error_message([&] { check_gguf_model_representable(config, arch, "m/config.json"); });
}

TEST(GgufModelKeys, RepresentableGemmaAndOtherFamiliesPass) {
  EXPECT_NO_THROW(check_gguf_model_representable(model_config_from_json(gemma2_json(), "m"), "gemma2", "m"));
  ModelConfig llama;
  llama.architecture = "LlamaForCausalLM";
  EXPECT_NO_THROW(check_gguf_model_representable(llama, "llama", "m"));
}

TEST(GgufModelKeys, ConfigsLlamaCppWouldRunDifferentlyAreRefused) {
  auto untied = gemma2_json();
  untied["tie_word_embeddings"] = false;
  EXPECT_NE(refusal(untied, "gemma2").find("llama.cpp's gemma2 has no output tensor"), std::string::npos);
  auto scalar = gemma2_json();
  scalar["query_pre_attn_scalar"] = 24;
  const auto scale_message = refusal(scalar, "gemma2");
  EXPECT_NE(scale_message.find("query_pre_attn_scalar 24.000000 differs from the 16.000000"), std::string::npos)
      << scale_message;
  auto layers = gemma2_json();
  layers["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  const auto layer_message = refusal(layers, "gemma2");
  EXPECT_NE(layer_message.find("layer 0 is a full-attention layer"), std::string::npos) << layer_message;
}

nlohmann::json qwen3_moe_json() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"vocab_size", 256},
          {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"head_dim", 16}, {"num_experts", 4}, {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 32}, {"norm_topk_prob", true}};
}

// llama.cpp's qwen3moe and llama (Mixtral) run experts in every layer, renormalise the top-k
// weights and attend to every position: a config that says otherwise has no GGUF form.
TEST(GgufModelKeys, MoeConfigsLlamaCppWouldRunDifferentlyAreRefused) {
  EXPECT_NO_THROW(check_gguf_model_representable(model_config_from_json(qwen3_moe_json(), "m"), "qwen3moe", "m"));
  auto dense = qwen3_moe_json();
  dense["mlp_only_layers"] = {1};
  auto message = refusal(dense, "qwen3moe");
  EXPECT_NE(message.find("layer 1 is a dense MLP layer"), std::string::npos) << message;
  auto step = qwen3_moe_json();
  step["decoder_sparse_step"] = 2;
  message = refusal(step, "qwen3moe");
  EXPECT_NE(message.find("layer 0 is a dense MLP layer"), std::string::npos) << message;
  auto unnormalised = qwen3_moe_json();
  unnormalised["norm_topk_prob"] = false;
  message = refusal(unnormalised, "qwen3moe");
  EXPECT_NE(message.find("norm_topk_prob is false"), std::string::npos) << message;
  nlohmann::json mixtral = {{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"},
                            {"vocab_size", 256}, {"hidden_size", 64}, {"intermediate_size", 64},
                            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                            {"num_local_experts", 8}, {"num_experts_per_tok", 2}};
  EXPECT_NO_THROW(check_gguf_model_representable(model_config_from_json(mixtral, "m"), "llama", "m"));
  mixtral["sliding_window"] = 5;
  message = refusal(mixtral, "llama");
  EXPECT_NE(message.find("sliding_window 5 is set"), std::string::npos) << message;
}

// A RoPE scaling the export writes no keys for (yarn, dynamic) is refused, not dropped.
TEST(GgufModelKeys, RopeScalingWithoutKeysIsRefused) {
  const nlohmann::json llama = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 256},
                                {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
                                {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  EXPECT_NO_THROW(check_gguf_model_representable(model_config_from_json(llama, "m"), "llama", "m"));
  for (const char* type : {"yarn", "dynamic"}) {
    auto scaled = llama;
    scaled["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
    const auto message = refusal(scaled, "llama");
    EXPECT_NE(message.find(std::string("rope_scaling.rope_type '") + type + "' has no GGUF form"), std::string::npos)
        << message;
  }
  auto linear = llama;
  linear["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_NO_THROW(check_gguf_model_representable(model_config_from_json(linear, "m"), "llama", "m"));
}

// Gemma-3: every 6th layer full in llama.cpp; sliding_window_pattern 1 means no window at all.
TEST(GgufModelKeys, Gemma3SlidingPatternMustBeLlamaCppsFixedOne) {
  auto gemma3 = gemma2_json();
  gemma3["architectures"] = {"Gemma3ForCausalLM"};
  gemma3["model_type"] = "gemma3_text";
  gemma3["num_hidden_layers"] = 6;
  const auto representable = [&] {
    check_gguf_model_representable(model_config_from_json(gemma3, "m"), "gemma3", "m");
  };
  EXPECT_NO_THROW(representable());
  gemma3["sliding_window_pattern"] = 2;
  EXPECT_NE(refusal(gemma3, "gemma3").find("layer 1 is a full-attention layer"), std::string::npos);
  gemma3["sliding_window_pattern"] = 1;
  EXPECT_NO_THROW(representable());
}

TEST(GgufModelKeys, ConverterHparamsLiftTheTextConfig) {
  ModelConfig config;
  config.raw = {{"model_type", "gemma3"}, {"vocab_size", 1}, {"text_config", {{"vocab_size", 7}, {"head_dim", 3}}}};
  const auto hparams = gguf_converter_hparams(config);
  EXPECT_EQ(hparams["vocab_size"], 7);
  EXPECT_EQ(hparams["head_dim"], 3);
  EXPECT_EQ(hparams["model_type"], "gemma3");
}

}  // namespace
}  // namespace finetune
