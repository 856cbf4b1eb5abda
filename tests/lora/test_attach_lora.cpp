// LoRA as PEFT sets it up: which layers get adapters, the initialisation, scaling, dtypes.
#include <gtest/gtest.h>

#include <cmath>

#include "../model/tiny_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/lora/lora_adapter.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

ModelConfig small_config() { return tiny_llama_config({32, 256, 512, 2, 4, 2, 64}); }

LoraConfig lora_config(std::vector<std::string> targets, int64_t r = 8, bool rslora = false) {
  LoraConfig config;
  config.r = r;
  config.lora_alpha = 16;
  config.use_rslora = rslora;
  config.target_modules = std::move(targets);
  return config;
}

TEST(LoraModel, AdaptersFollowTargetModulesWithPeftNamesShapesAndDtypes) {
  CausalLM model(small_config(), at::kBFloat16, at::kCPU);
  const auto trainable = attach_lora(model, lora_config({"q_proj", "down_proj"}), 1);
  ASSERT_EQ(trainable.size(), 2u * 2u * 2u);  // 2 layers x 2 targets x (A, B)
  EXPECT_EQ(trainable[0].first, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(trainable[1].first, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(trainable[2].first, "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight");
  EXPECT_EQ(trainable[0].second.sizes(), (std::vector<int64_t>{8, 256}));   // (r, in)
  EXPECT_EQ(trainable[1].second.sizes(), (std::vector<int64_t>{256, 8}));   // (out, r)
  EXPECT_EQ(trainable[2].second.sizes(), (std::vector<int64_t>{8, 512}));
  for (const auto& [name, tensor] : trainable) {
    EXPECT_EQ(tensor.scalar_type(), at::kFloat) << name;  // fp32 adapters on a bf16 base, as PEFT
    EXPECT_TRUE(tensor.requires_grad()) << name;
  }
}

TEST(LoraModel, InitIsKaimingUniformA_ZeroB_SeededByRandomState) {
  CausalLM model(small_config(), at::kFloat, at::kCPU);
  const auto trainable = attach_lora(model, lora_config({"q_proj", "gate_proj", "down_proj"}), 3407);
  for (const auto& [name, tensor] : trainable) {
    if (name.find("lora_B") != std::string::npos) {
      EXPECT_EQ(tensor.abs().max().item<float>(), 0.0f) << name;
      continue;
    }
    // kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)), variance bound^2 / 3.
    const double bound = 1.0 / std::sqrt(static_cast<double>(tensor.size(1)));
    EXPECT_LE(tensor.abs().max().item<double>(), bound) << name;
    EXPECT_GT(tensor.abs().max().item<double>(), 0.95 * bound) << name;
    EXPECT_NEAR(tensor.mean().item<double>(), 0.0, 0.05 * bound) << name;
    EXPECT_NEAR(tensor.var().item<double>(), bound * bound / 3.0, 0.08 * bound * bound / 3.0) << name;
  }
  CausalLM same(small_config(), at::kFloat, at::kCPU);
  CausalLM other(small_config(), at::kFloat, at::kCPU);
  const auto again = attach_lora(same, lora_config({"q_proj", "gate_proj", "down_proj"}), 3407);
  const auto different = attach_lora(other, lora_config({"q_proj", "gate_proj", "down_proj"}), 1);
  EXPECT_TRUE(at::equal(trainable[0].second, again[0].second));
  EXPECT_FALSE(at::equal(trainable[0].second, different[0].second));
}

TEST(LoraModel, ScalingIsAlphaOverRankOrOverSqrtRankWithRsLora) {
  EXPECT_DOUBLE_EQ(lora_scaling(lora_config({"q_proj"}, 8)), 2.0);
  EXPECT_DOUBLE_EQ(lora_scaling(lora_config({"q_proj"}, 16, /*rslora=*/true)), 4.0);
  CausalLM model(small_config(), at::kFloat, at::kCPU);
  attach_lora(model, lora_config({"v_proj"}, 4, true), 1);
  for (auto& [name, linear] : model.named_linears()) {
    if (name.find("v_proj") != std::string::npos) {
      const auto* lora = dynamic_cast<const LoraAdapter*>(linear->adapter.get());
      ASSERT_NE(lora, nullptr);
      EXPECT_DOUBLE_EQ(lora->scaling, 8.0);  // 16 / sqrt(4)
    } else {
      EXPECT_FALSE(linear->adapter) << name;
    }
  }
}

TEST(LoraModel, UnknownTargetModuleIsAUsageError) {
  CausalLM model(small_config(), at::kFloat, at::kCPU);
  try {
    attach_lora(model, lora_config({"q_proj", "qkv_proj"}), 1);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("qkv_proj"), std::string::npos);
  }
}

// PEFT's LoraConfig.bias on a model with q/k/v/o biases (llama's attention_bias): which biases
// train, and the names get_peft_model_state_dict saves them under.
TEST(LoraModel, BiasNoneAllOrLoraOnlyTrainsThoseBiasesUnderPeftNames) {
  ModelConfig config = small_config();
  config.attention_bias = true;         // q/k/v
  config.attention_output_bias = true;  // o (llama's attention_bias, as config.json reads it)
  const std::string layer0 = "base_model.model.model.layers.0.self_attn.";
  const auto trained_biases = [&](const std::string& bias) {
    CausalLM model(config, at::kFloat, at::kCPU);
    auto lora = lora_config({"q_proj", "v_proj"});
    lora.bias = bias;
    std::vector<std::string> names;
    const auto trainable = attach_lora(model, lora, 1);
    for (const auto& [name, tensor] : trainable) {
      EXPECT_TRUE(tensor.requires_grad()) << name;
      if (ends_with(name, "bias")) names.push_back(name);
    }
    const auto listed = lora_parameters(model);
    EXPECT_EQ(listed.size(), trainable.size());  // what is saved, loaded and resumed is what trains
    return names;
  };
  EXPECT_TRUE(trained_biases("none").empty());
  const std::vector<std::string> lora_only = trained_biases("lora_only");
  ASSERT_EQ(lora_only.size(), 4u);  // 2 layers x (q, v)
  EXPECT_EQ(lora_only[0], layer0 + "q_proj.base_layer.bias");
  EXPECT_EQ(lora_only[1], layer0 + "v_proj.base_layer.bias");
  const std::vector<std::string> all = trained_biases("all");
  ASSERT_EQ(all.size(), 8u);  // 2 layers x (q, k, v, o)
  EXPECT_EQ(all[0], layer0 + "q_proj.base_layer.bias");
  EXPECT_EQ(all[1], layer0 + "k_proj.bias");  // not adapted: no base_layer
  EXPECT_EQ(all[2], layer0 + "v_proj.base_layer.bias");
  EXPECT_EQ(all[3], layer0 + "o_proj.bias");
  CausalLM model(config, at::kFloat, at::kCPU);
  EXPECT_THROW(mark_trainable_biases(model, "some"), UsageError);
}

// PEFT's modules_to_save: embed_tokens trains whole and is listed (saved, loaded, resumed) first,
// under PEFT's name; a tied head or another module is refused.
TEST(LoraModel, ModulesToSaveTrainsTheEmbeddingUnderItsPeftName) {
  ModelConfig config = small_config();
  config.tie_word_embeddings = false;
  CausalLM model(config, at::kFloat, at::kCPU);
  auto lora = lora_config({"q_proj"});
  lora.modules_to_save = {"embed_tokens"};
  const auto trainable = attach_lora(model, lora, 1);
  ASSERT_EQ(trainable.size(), 1u + 2u * 2u);
  EXPECT_EQ(trainable[0].first, "base_model.model.model.embed_tokens.weight");
  EXPECT_EQ(trainable[0].second.sizes(), (std::vector<int64_t>{32, 256}));
  EXPECT_TRUE(trainable[0].second.requires_grad());
  config.tie_word_embeddings = true;
  CausalLM tied(config, at::kFloat, at::kCPU);
  EXPECT_THROW(mark_modules_to_save(tied, {"embed_tokens"}), UsageError);
  CausalLM untied(small_config(), at::kFloat, at::kCPU);
  EXPECT_THROW(mark_modules_to_save(untied, {"lm_head"}), UsageError);
}

TEST(LoraModel, TrainedBiasesNeedAFloat32Model) {
  CausalLM half(small_config(), at::kBFloat16, at::kCPU);
  LoraConfig config;
  check_base_tensors_trainable(half, config, true);
  config.bias = "all";
  EXPECT_THROW(check_base_tensors_trainable(half, config, false), UsageError);
  CausalLM full(small_config(), at::kFloat, at::kCPU);
  config.bias = "lora_only";
  config.modules_to_save = {"embed_tokens"};
  check_base_tensors_trainable(full, config, false);
  EXPECT_THROW(check_base_tensors_trainable(full, config, true), UsageError);  // gradient checkpointing
  config.bias = "none";
  EXPECT_THROW(check_base_tensors_trainable(half, config, false), UsageError);
}

TEST(LoraModel, AdapterConfigRoundTripsAndRejectsUnsupportedSettings) {
  auto config = lora_config({"q_proj", "v_proj"}, 4, true);
  const auto json = adapter_config_json(config, "base");
  EXPECT_EQ(json["peft_type"], "LORA");
  EXPECT_EQ(json["task_type"], "CAUSAL_LM");
  const auto back = lora_config_from_adapter_json(json, "adapter_config.json");
  EXPECT_EQ(back.r, 4);
  EXPECT_DOUBLE_EQ(back.lora_alpha, 16);
  EXPECT_TRUE(back.use_rslora);
  EXPECT_EQ(back.target_modules, config.target_modules);
  EXPECT_FALSE(back.use_dora);
  config.use_dora = true;
  EXPECT_EQ(adapter_config_json(config, "base")["use_dora"], true);
  EXPECT_TRUE(lora_config_from_adapter_json(adapter_config_json(config, "base"), "adapter_config.json").use_dora);
  config.bias = "lora_only";
  EXPECT_EQ(lora_config_from_adapter_json(adapter_config_json(config, "base"), "adapter_config.json").bias,
            "lora_only");
  auto bias = json;
  bias["bias"] = "some";
  EXPECT_THROW(lora_config_from_adapter_json(bias, "adapter_config.json"), Error);
}

}  // namespace
}  // namespace finetune

namespace finetune {
namespace {

// Note [Graphed micro-steps]: only adapters whose capture was verified on a GPU replay from CUDA
// graphs (plain LoRA without dropout, on 16-bit or 4-bit projections); the rest train eagerly.
TEST(LoraModel, CudaGraphsOnlyForPlainLoraWithoutDropout) {
  auto model_with = [](double dropout, bool dora, bool projections_4bit) {
    auto model = std::make_unique<CausalLM>(small_config(), at::kFloat, at::kCPU, projections_4bit);
    LoraConfig lora;
    lora.r = 4;
    lora.lora_alpha = 8;
    lora.lora_dropout = dropout;
    lora.use_dora = dora;
    lora.target_modules = {"q_proj", "v_proj"};
    if (!projections_4bit) attach_lora(*model, lora, 3);
    return model;
  };
  EXPECT_TRUE(model_with(0.0, false, false)->cuda_graph_safe());
  EXPECT_FALSE(model_with(0.1, false, false)->cuda_graph_safe());
  EXPECT_FALSE(model_with(0.0, true, false)->cuda_graph_safe());
  EXPECT_TRUE(model_with(0.0, false, true)->cuda_graph_safe());
}

}  // namespace
}  // namespace finetune
