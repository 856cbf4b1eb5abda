// The mixture-of-experts keys of config.json (Qwen3MoeConfig, MixtralConfig in transformers 5.17):
// their class defaults, both spellings of Qwen3-MoE's expert count, which layers are sparse, and
// errors naming the file and the field for values finetune would compute wrongly or cannot build.
#include <gtest/gtest.h>

#include <string>

#include "finetune/io/model_config.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::json;

json qwen3_moe_config() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"vocab_size", 64},
          {"hidden_size", 32}, {"intermediate_size", 48}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"head_dim", 8}, {"moe_intermediate_size", 16}, {"num_experts", 8},
          {"num_experts_per_tok", 2}};
}

json mixtral_config() {
  return {{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"}, {"vocab_size", 64},
          {"hidden_size", 32}, {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", 8}};
}

std::string error_of(const json& config) {
  try {
    model_config_from_json(config, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MoeModelConfig, Qwen3MoeDefaultsAndSparseLayers) {
  auto c = model_config_from_json(qwen3_moe_config(), "config.json");
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->num_experts_per_tok, 2);
  EXPECT_EQ(c.moe->moe_intermediate_size, 16);
  EXPECT_FALSE(c.moe->norm_topk_prob);
  EXPECT_TRUE(c.moe->routing_weights_in_model_dtype);
  EXPECT_DOUBLE_EQ(c.moe->router_aux_loss_coef, 0.001);
  EXPECT_FALSE(c.moe->output_router_logits);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  for (int64_t layer = 0; layer < 4; ++layer) EXPECT_TRUE(layer_is_sparse(c, layer));

  auto json = qwen3_moe_config();
  json["decoder_sparse_step"] = 2;
  json["mlp_only_layers"] = {3};
  json.erase("num_experts");
  json["num_local_experts"] = 4;  // save_pretrained's spelling (attribute_map)
  c = model_config_from_json(json, "config.json");
  EXPECT_EQ(c.moe->num_experts, 4);
  EXPECT_FALSE(layer_is_sparse(c, 0));
  EXPECT_TRUE(layer_is_sparse(c, 1));
  EXPECT_FALSE(layer_is_sparse(c, 2));
  EXPECT_FALSE(layer_is_sparse(c, 3));  // mlp_only_layers wins
}

TEST(MoeModelConfig, MixtralDefaults) {
  const auto c = model_config_from_json(mixtral_config(), "config.json");
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->num_experts_per_tok, 2);
  EXPECT_EQ(c.moe->moe_intermediate_size, 48);  // each expert is intermediate_size wide
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_FALSE(c.moe->routing_weights_in_model_dtype);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.sliding_window.has_value());  // MixtralConfig: None unless set
  ASSERT_TRUE(c.bos_token_id.has_value());
  EXPECT_EQ(*c.bos_token_id, 1);

  auto windowed = mixtral_config();
  windowed["sliding_window"] = 5;
  const auto w = model_config_from_json(windowed, "config.json");
  ASSERT_TRUE(w.sliding_window.has_value());
  EXPECT_EQ(*w.sliding_window, 5);
  EXPECT_TRUE(layer_is_sliding(w, 1));
}

TEST(MoeModelConfig, DenseModelsHaveNoExperts) {
  json llama = mixtral_config();
  llama["architectures"] = {"LlamaForCausalLM"};
  llama["model_type"] = "llama";
  const auto c = model_config_from_json(llama, "config.json");
  EXPECT_FALSE(c.moe.has_value());
  EXPECT_FALSE(layer_is_sparse(c, 0));
}

TEST(MoeModelConfig, ErrorsNameTheFileAndField) {
  const auto expect_error = [](const json& config, const std::string& field) {
    const std::string message = error_of(config);
    EXPECT_TRUE(contains(message, "config.json") && contains(message, field)) << field << ": " << message;
  };
  auto c = qwen3_moe_config();
  c["num_experts_per_tok"] = 9;
  expect_error(c, "num_experts_per_tok");
  c = qwen3_moe_config();
  c["num_experts"] = 0;
  expect_error(c, "num_experts");
  c = qwen3_moe_config();
  c["num_experts"] = 100000;
  expect_error(c, "num_experts");
  c = qwen3_moe_config();
  c["mlp_only_layers"] = {4};
  expect_error(c, "mlp_only_layers");
  c = qwen3_moe_config();
  c["mlp_only_layers"] = "1";
  expect_error(c, "mlp_only_layers");
  c = qwen3_moe_config();
  c["decoder_sparse_step"] = 0;
  expect_error(c, "decoder_sparse_step");
  c = qwen3_moe_config();
  c["moe_intermediate_size"] = int64_t{1} << 30;
  expect_error(c, "moe_intermediate_size");
  c = qwen3_moe_config();
  c["router_aux_loss_coef"] = -1;
  expect_error(c, "router_aux_loss_coef");
  c = qwen3_moe_config();
  c["use_sliding_window"] = true;
  expect_error(c, "use_sliding_window");
  c = mixtral_config();
  c["router_jitter_noise"] = 0.1;
  expect_error(c, "router_jitter_noise");
}

}  // namespace
}  // namespace finetune
