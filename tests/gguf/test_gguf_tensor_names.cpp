// GGUF architecture and tensor names, Gemma's norm shift and Phi-3's rope factor tensors, as
// llama.cpp's converter writes them.
#include <gtest/gtest.h>

#include "../test_support.h"

#include "finetune/gguf/gguf_tensor_names.h"
#include "finetune/io/model_config.h"
#include "finetune/model/architecture.h"

namespace finetune {
namespace {

ModelConfig config_of(const std::string& architecture) {
  ModelConfig config;
  config.architecture = architecture;
  return config;
}

TEST(GgufTensorNames, ArchitectureNamesOfTheExportedFamilies) {
  EXPECT_EQ(gguf_architecture(config_of("LlamaForCausalLM"), "m/config.json"), "llama");
  EXPECT_EQ(gguf_architecture(config_of("MistralForCausalLM"), "m/config.json"), "llama");
  EXPECT_EQ(gguf_architecture(config_of("Qwen2ForCausalLM"), "m/config.json"), "qwen2");
  EXPECT_EQ(gguf_architecture(config_of("Qwen3ForCausalLM"), "m/config.json"), "qwen3");
  EXPECT_EQ(gguf_architecture(config_of("Phi3ForCausalLM"), "m/config.json"), "phi3");
  EXPECT_EQ(gguf_architecture(config_of("Gemma2ForCausalLM"), "m/config.json"), "gemma2");
  EXPECT_EQ(gguf_architecture(config_of("Gemma3ForCausalLM"), "m/config.json"), "gemma3");
  EXPECT_EQ(gguf_architecture(config_of("Gemma3ForConditionalGeneration"), "m/config.json"), "gemma3");
}

// Note [GGUF expert tensors]: the router and the expert stacks' GGUF tensors (gate and up rows of
// gate_up_proj), placed where the converter stacks a layer's experts from the checkpoint's
// per-expert tensors, in its checkpoint leaf names' order.
TEST(GgufTensorNames, ExpertTensorsOfQwen3MoeAndMixtral) {
  EXPECT_EQ(gguf_architecture(config_of("Qwen3MoeForCausalLM"), "m/config.json"), "qwen3moe");
  EXPECT_EQ(gguf_architecture(config_of("MixtralForCausalLM"), "m/config.json"), "llama");
  auto config = config_of("Qwen3MoeForCausalLM");
  config.hidden_size = 64;
  config.moe = MoeConfig{};
  config.moe->num_experts = 12;
  config.moe->moe_intermediate_size = 32;
  const auto& qwen = architecture_of(config);
  const auto router = gguf_tensor_parts(qwen, config, "model.layers.3.mlp.gate.weight");
  ASSERT_EQ(router.size(), 1u);
  EXPECT_EQ(router[0].gguf_name, "blk.3.ffn_gate_inp.weight");
  EXPECT_EQ(router[0].converter_position, "model.layers.3.mlp.gate.weight");
  const auto gate_up = gguf_tensor_parts(qwen, config, "model.layers.3.mlp.experts.gate_up_proj");
  ASSERT_EQ(gate_up.size(), 2u);
  EXPECT_EQ(gate_up[0].gguf_name, "blk.3.ffn_gate_exps.weight");
  EXPECT_EQ(gate_up[1].gguf_name, "blk.3.ffn_up_exps.weight");
  EXPECT_EQ(gate_up[1].row_begin, 32);
  EXPECT_EQ(gate_up[1].rows, 32);
  // experts.9 sorts after experts.11: the converter has all 12 once experts.9.up_proj arrives.
  EXPECT_EQ(gate_up[0].converter_position, "model.layers.3.mlp.experts.9.up_proj.weight");
  const auto down = gguf_tensor_parts(qwen, config, "model.layers.3.mlp.experts.down_proj");
  EXPECT_EQ(down[0].converter_position, gate_up[0].converter_position);
  EXPECT_LT(down[0].converter_rank, gate_up[0].converter_rank);  // down_proj, gate_proj, up_proj
  auto mixtral_config = config;
  mixtral_config.architecture = "MixtralForCausalLM";
  const auto& mixtral = architecture_of(mixtral_config);
  const auto mixtral_router = gguf_tensor_parts(mixtral, mixtral_config, "model.layers.0.mlp.gate.weight");
  EXPECT_EQ(mixtral_router[0].converter_position, "model.layers.0.block_sparse_moe.gate.weight");
  const auto mixtral_down = gguf_tensor_parts(mixtral, mixtral_config, "model.layers.0.mlp.experts.down_proj");
  const auto mixtral_gate_up = gguf_tensor_parts(mixtral, mixtral_config, "model.layers.0.mlp.experts.gate_up_proj");
  EXPECT_EQ(mixtral_down[0].converter_rank, "w2");
  EXPECT_LT(mixtral_gate_up[0].converter_rank, mixtral_down[0].converter_rank);  // w1 (gate), w2, w3 (up)
  EXPECT_LT(mixtral_down[0].converter_rank, mixtral_gate_up[1].converter_rank);
  const auto attention = gguf_tensor_parts(mixtral, mixtral_config, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(attention[0].gguf_name, "blk.0.attn_q.weight");
  EXPECT_EQ(gguf_permute_heads("llama", mixtral_config, "model.layers.0.mlp.experts.gate_up_proj"), 0);
}

TEST(GgufTensorNames, AnUnknownArchitectureIsRefusedByName) {
  const std::string message = testing::error_message([&] { gguf_architecture(config_of("GPTNeoXForCausalLM"), "m/config.json"); });
  EXPECT_NE(message.find("m/config.json: architecture 'GPTNeoXForCausalLM' has no GGUF export"), std::string::npos)
      << message;
  EXPECT_NE(message.find("LlamaForCausalLM"), std::string::npos) << message;
}

// Phi-3's fused projections keep their GGUF names (attn_qkv, gate_up as ffn_up) and are not
// permuted; Gemma-3's text tower inside Gemma3ForConditionalGeneration maps by its own prefix.
TEST(GgufTensorNames, FusedAndGemmaNames) {
  const auto& phi3 = *find_architecture_by_class("Phi3ForCausalLM");
  EXPECT_EQ(gguf_tensor_name(phi3, "model.layers.1.self_attn.qkv_proj.weight"), "blk.1.attn_qkv.weight");
  EXPECT_EQ(gguf_tensor_name(phi3, "model.layers.0.mlp.gate_up_proj.weight"), "blk.0.ffn_up.weight");
  EXPECT_EQ(gguf_permute_heads("phi3", config_of("Phi3ForCausalLM"), "model.layers.0.self_attn.qkv_proj.weight"), 0);
  const auto& gemma3 = *find_architecture_by_class("Gemma3ForConditionalGeneration");
  EXPECT_EQ(gguf_tensor_name(gemma3, "model.language_model.layers.2.post_feedforward_layernorm.weight"),
            "blk.2.post_ffw_norm.weight");
  EXPECT_EQ(gguf_tensor_name(gemma3, "model.language_model.layers.0.self_attn.q_norm.weight"), "blk.0.attn_q_norm.weight");
  EXPECT_EQ(gguf_tensor_name(gemma3, "model.language_model.embed_tokens.weight"), "token_embd.weight");
}

// Gemma's modify_tensors: every "*norm.weight" as 1 + w, added in float32 (float16 stays float16);
// the projections and the other families' norms as they are.
TEST(GgufTensorNames, GemmaNormsAreShiftedByOneAsTheConverterDoes) {
  const auto& gemma2 = *find_architecture_by_class("Gemma2ForCausalLM");
  const auto& llama = *find_architecture_by_class("LlamaForCausalLM");
  EXPECT_TRUE(gguf_shifts_norm(gemma2, "model.layers.0.pre_feedforward_layernorm.weight"));
  EXPECT_TRUE(gguf_shifts_norm(gemma2, "model.norm.weight"));
  EXPECT_FALSE(gguf_shifts_norm(gemma2, "model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(gguf_shifts_norm(llama, "model.norm.weight"));
  const auto bf16 = at::tensor({0.00390625, -0.5}, at::kDouble).to(at::kBFloat16);
  const auto shifted = gguf_shift_norm(bf16);
  EXPECT_EQ(shifted.scalar_type(), at::kFloat);
  EXPECT_EQ(shifted[0].item<float>(), 1.00390625f);  // exact in float32, not rounded to bf16's 1.0
  const auto half = at::tensor({0.00048828125}, at::kDouble).to(at::kHalf);
  EXPECT_EQ(gguf_shift_norm(half).scalar_type(), at::kHalf);
  EXPECT_EQ(gguf_shift_norm(half)[0].item<float>(), 1.0f);  // 1 + 2^-11 rounds to 1 in float16, as numpy's
}

// Phi-3's longrope factors become rope_factors_long / rope_factors_short (float32, converter
// order); other configs get none (Llama-3 scaling gets rope_freqs).
TEST(GgufTensorNames, Phi3LongropeFactorTensors) {
  ModelConfig config = config_of("Phi3ForCausalLM");
  config.hidden_size = 64;
  config.num_attention_heads = 4;
  config.partial_rotary_factor = 0.75;
  config.rope_scaling.rope_type = "longrope";
  config.rope_scaling.long_factor = {1.1, 2.2, 3.3, 4.4, 5.5, 6.6};
  config.rope_scaling.short_factor = {1, 1, 1, 1, 1, 1.5};
  const auto extra = gguf_extra_tensors(config, "phi3");
  ASSERT_EQ(extra.size(), 2u);
  EXPECT_EQ(extra[0].first, "rope_factors_long.weight");
  EXPECT_EQ(extra[1].first, "rope_factors_short.weight");
  EXPECT_EQ(extra[0].second.scalar_type(), at::kFloat);
  EXPECT_EQ(extra[0].second[1].item<float>(), 2.2f);
  EXPECT_EQ(extra[1].second[5].item<float>(), 1.5f);
  config.rope_scaling.long_factor.pop_back();
  const std::string message = testing::error_message([&] { gguf_extra_tensors(config, "phi3"); });
  EXPECT_NE(message.find("must have 6 entries"), std::string::npos) << message;
  EXPECT_TRUE(gguf_extra_tensors(config_of("LlamaForCausalLM"), "llama").empty());
}

}  // namespace
}  // namespace finetune
