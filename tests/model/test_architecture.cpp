// The architecture name table (model/architecture.h): each architecture's class name, model_type
// and layer tensor names as transformers and llama.cpp spell them, config.json dispatch through
// it, the error an unknown class gets, and a fused projection (Note [Fused projections]) split
// into its logical outputs and computing what its separate projections compute.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <functional>

#include "finetune/io/model_config.h"
#include "finetune/model/architecture.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/decoder_blocks.h"
#include "finetune/model/decoder_composition.h"
#include "finetune/model/projection_names.h"
#include "tiny_config.h"

namespace finetune {
namespace {

std::vector<std::string> paths_of(const Architecture& architecture) {
  std::vector<std::string> paths;
  for (const auto& module : architecture.layer_modules) paths.push_back(module.path);
  return paths;
}

const std::vector<std::string> kLlamaPaths = {
    "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",   "mlp.up_proj",      "mlp.down_proj",    "post_attention_layernorm"};
const std::vector<std::string> kProjections = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

TEST(Architecture, EachFamilyHasItsHfNames) {
  struct Expected {
    std::string class_name, model_type, gguf;
    bool permutes_qk;
  };
  for (const auto& e : std::vector<Expected>{{"LlamaForCausalLM", "llama", "llama", true},
                                             {"Qwen2ForCausalLM", "qwen2", "qwen2", false},
                                             {"Qwen3ForCausalLM", "qwen3", "qwen3", false},
                                             {"MistralForCausalLM", "mistral", "llama", true}}) {
    SCOPED_TRACE(e.class_name);
    const Architecture* architecture = find_architecture_by_class(e.class_name);
    ASSERT_NE(architecture, nullptr);
    EXPECT_EQ(architecture, find_architecture_by_model_type(e.model_type));
    EXPECT_EQ(architecture->model_type, e.model_type);
    EXPECT_EQ(architecture->gguf_architecture, e.gguf);
    EXPECT_EQ(architecture->gguf_permutes_qk, e.permutes_qk);
    EXPECT_EQ(architecture->embed_tokens, "model.embed_tokens.weight");
    EXPECT_EQ(architecture->final_norm, "model.norm.weight");
    EXPECT_EQ(architecture->lm_head, "lm_head.weight");
    EXPECT_EQ(architecture->layer_prefix, "model.layers.");
    EXPECT_EQ(lora_target_names(*architecture), kProjections);
    auto expected_paths = kLlamaPaths;
    if (e.model_type == "qwen3") {
      expected_paths.insert(expected_paths.begin() + 5, {"self_attn.q_norm", "self_attn.k_norm"});
    }
    EXPECT_EQ(paths_of(*architecture), expected_paths);
    EXPECT_EQ(has_role(*architecture, ModuleRole::kQueryNorm), e.model_type == "qwen3");
  }
}

TEST(Architecture, ModulesCarryTheirRolesAndGgufNames) {
  const auto& llama = *find_architecture_by_class("LlamaForCausalLM");
  std::vector<std::string> gguf;
  for (const auto& module : llama.layer_modules) {
    gguf.push_back(module.gguf_name);
    EXPECT_EQ(module.roles.size(), 1u) << module.path;
  }
  EXPECT_EQ(gguf, (std::vector<std::string>{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                                            "ffn_up", "ffn_down", "ffn_norm"}));
  EXPECT_EQ(llama.layer_modules.front().roles.front(), ModuleRole::kAttentionInputNorm);
  EXPECT_FALSE(llama.layer_modules.front().is_projection());
  EXPECT_EQ(llama.layer_modules.back().roles.front(), ModuleRole::kMlpInputNorm);
  EXPECT_EQ(llama.layer_modules[1].leaf_name(), "q_proj");
  EXPECT_TRUE(llama.layer_modules[1].is_projection());
}

TEST(Architecture, OptionParserNamesAreEveryFamilysTargets) {
  std::vector<std::string> every_family = kProjections;  // Llama's, then Phi-3's fused ones
  every_family.insert(every_family.end(), {"qkv_proj", "gate_up_proj"});
  EXPECT_EQ(all_lora_target_names(), every_family);
  EXPECT_EQ(projection_names(), every_family);
}

TEST(Architecture, ConfigDispatchesThroughTheTable) {
  nlohmann::json json = {{"model_type", "qwen3"},   {"vocab_size", 32},       {"hidden_size", 64},
                         {"intermediate_size", 24}, {"num_hidden_layers", 1}, {"num_attention_heads", 32}};
  auto config = model_config_from_json(json, "config.json");
  EXPECT_EQ(config.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(config.qk_norm);
  EXPECT_EQ(config.head_dim, 128);  // Qwen3Config's defaults, from the table
  EXPECT_EQ(config.num_key_value_heads, 32);
  EXPECT_EQ(&architecture_of(config), find_architecture_by_model_type("qwen3"));
  json["architectures"] = {"MistralForCausalLM"};
  json["model_type"] = "mistral";
  config = model_config_from_json(json, "config.json");
  EXPECT_EQ(architecture_of(config).id, ArchitectureId::kMistral);
  EXPECT_EQ(config.num_key_value_heads, 8);
  EXPECT_FALSE(config.qk_norm);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Architecture, UnknownClassIsAnErrorNamingIt) {
  ModelConfig config = tiny_llama_config({32, 16, 24, 1, 2, 2, 8});
  config.architecture = "FalconForCausalLM";
  const auto message = error_of([&] { architecture_of(config); });
  EXPECT_NE(message.find("FalconForCausalLM"), std::string::npos) << message;
  EXPECT_NE(message.find("LlamaForCausalLM"), std::string::npos) << message;  // the supported ones
  EXPECT_NE(error_of([&] { CausalLM(config, at::kFloat, at::kCPU); }).find("FalconForCausalLM"), std::string::npos);
  EXPECT_EQ(find_architecture_by_class("FalconForCausalLM"), nullptr);
  EXPECT_EQ(find_architecture_by_model_type("falcon"), nullptr);
  nlohmann::json json = {{"architectures", {"Starcoder2ForCausalLM"}}, {"vocab_size", 32}};
  const auto from_json = error_of([&] { model_config_from_json(json, "x/config.json"); });
  EXPECT_NE(from_json.find("Starcoder2ForCausalLM"), std::string::npos) << from_json;
  EXPECT_NE(from_json.find("x/config.json"), std::string::npos) << from_json;
}

// Gemma-2 and Gemma-3: four (1 + w) norms per layer in HF's parameter order, Gemma-3's q/k norms, the
// seven projections as LoRA targets, no GGUF export; Gemma3ForConditionalGeneration's text tower
// under model.language_model (stored as language_model.model.*), its vision tower ignored.
TEST(Architecture, GemmaEntriesHaveTheirHfNames) {
  const std::vector<std::string> gemma2_paths = {
      "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
      "mlp.down_proj", "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
      "post_feedforward_layernorm"};
  const Architecture* gemma2 = find_architecture_by_class("Gemma2ForCausalLM");
  ASSERT_NE(gemma2, nullptr);
  EXPECT_EQ(gemma2, find_architecture_by_model_type("gemma2"));
  EXPECT_EQ(paths_of(*gemma2), gemma2_paths);
  EXPECT_TRUE(gemma2->rms_norm_unit_offset);
  EXPECT_EQ(gemma2->gguf_architecture, "gemma2");
  EXPECT_EQ(lora_target_names(*gemma2), kProjections);
  EXPECT_TRUE(has_role(*gemma2, ModuleRole::kAttentionOutputNorm) && has_role(*gemma2, ModuleRole::kMlpOutputNorm));
  for (const char* class_name : {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}) {
    SCOPED_TRACE(class_name);
    const Architecture* gemma3 = find_architecture_by_class(class_name);
    ASSERT_NE(gemma3, nullptr);
    auto expected = gemma2_paths;
    expected.insert(expected.begin() + 4, {"self_attn.q_norm", "self_attn.k_norm"});
    EXPECT_EQ(paths_of(*gemma3), expected);
    EXPECT_EQ(lora_target_names(*gemma3), kProjections);
  }
  EXPECT_EQ(find_architecture_by_model_type("gemma3_text"), find_architecture_by_class("Gemma3ForCausalLM"));
  const Architecture* multimodal = find_architecture_by_model_type("gemma3");
  ASSERT_EQ(multimodal, find_architecture_by_class("Gemma3ForConditionalGeneration"));
  EXPECT_EQ(multimodal->layer_prefix, "model.language_model.layers.");
  EXPECT_EQ(multimodal->embed_tokens, "model.language_model.embed_tokens.weight");
  EXPECT_EQ(multimodal->final_norm, "model.language_model.norm.weight");
  EXPECT_EQ(multimodal->lm_head, "lm_head.weight");
}

// Phi-3's layout: q, k, v in one projection and gate, up in another.
Architecture fused_llama() {
  using R = ModuleRole;
  Architecture fused = *find_architecture_by_class("LlamaForCausalLM");
  fused.class_names = {"FusedTestForCausalLM"};
  fused.layer_modules = {{"input_layernorm", {R::kAttentionInputNorm}, "attn_norm"},
                         {"self_attn.qkv_proj", {R::kQuery, R::kKey, R::kValue}, "attn_qkv"},
                         {"self_attn.o_proj", {R::kAttentionOutput}, "attn_output"},
                         {"mlp.gate_up_proj", {R::kGate, R::kUp}, "ffn_up"},
                         {"mlp.down_proj", {R::kDown}, "ffn_down"},
                         {"post_attention_layernorm", {R::kMlpInputNorm}, "ffn_norm"}};
  return fused;
}

TEST(Architecture, FusedProjectionSplitsIntoItsRoles) {
  const auto config = tiny_llama_config({32, 16, 24, 1, 4, 2, 8});  // q 4*8, k and v 2*8
  const auto fused = fused_llama();
  EXPECT_EQ(layer_module_split_sizes(fused.layer_modules[1], config), (std::vector<int64_t>{32, 16, 16}));
  EXPECT_EQ(layer_module_weight_shape(fused.layer_modules[1], config), (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(layer_module_split_sizes(fused.layer_modules[3], config), (std::vector<int64_t>{24, 24}));
  EXPECT_EQ(layer_module_weight_shape(fused.layer_modules[3], config), (std::vector<int64_t>{48, 16}));
  EXPECT_EQ(layer_module_weight_shape(fused.layer_modules[0], config), (std::vector<int64_t>{16}));
  EXPECT_EQ(lora_target_names(fused), (std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}));
  const LayerLayout layout(fused, config);
  EXPECT_EQ(layout.slot(ModuleRole::kKey).module, 1);
  EXPECT_EQ(layout.slot(ModuleRole::kKey).output, 1);
  EXPECT_EQ(layout.slot(ModuleRole::kUp).module, 3);
  EXPECT_EQ(layout.slot(ModuleRole::kUp).output, 1);
  EXPECT_FALSE(layout.has(ModuleRole::kQueryNorm));
  const LayerModule mixed{"mlp.odd_proj", {ModuleRole::kGate, ModuleRole::kDown}, "x"};  // inputs of two widths
  EXPECT_THROW(layer_module_weight_shape(mixed, config), Error);
}

// One layer through Llama's composition, with a plain causal SDPA kernel (in training with
// `after_mlp_backward` when given).
at::Tensor run_layer(const Architecture& architecture, const ModelConfig& config, const DecoderLayer& layer,
                     const at::Tensor& hidden, const std::function<void()>& after_mlp_backward = {}) {
  const LayerLayout layout(architecture, config);
  const KernelPolicy kernels;
  const auto position_ids = at::arange(hidden.size(1), at::kLong).unsqueeze(0);
  const auto rope = rope_tables(rope_inverse_frequencies(config, at::kCPU), position_ids, at::kFloat);
  const AttentionKernel kernel = [&config](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(config.head_dim));
    auto out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), std::nullopt,
                                                0.0, true, scale, /*enable_gqa=*/true);
    return out.transpose(1, 2).reshape({q.size(0), q.size(1), -1});
  };
  LayerContext context{layout, config, kernels, rope, kernel, /*training=*/static_cast<bool>(after_mlp_backward)};
  context.after_mlp_backward = after_mlp_backward;
  return decoder_composition(architecture.id).layer(layer, hidden, context);
}

// LayerContext::after_mlp_backward (what a layer recompute prefetches the previous layer's input
// on) runs once, when the MLP has back-propagated and the attention has not: down_proj's weight
// has its gradient then, q_proj's not yet.
TEST(Architecture, AfterMlpBackwardRunsBetweenTheMlpAndTheAttention) {
  const auto config = tiny_llama_config({32, 16, 24, 1, 4, 2, 8});
  const auto& llama = *find_architecture_by_class("LlamaForCausalLM");
  auto layer = make_decoder_layer(llama, config, at::TensorOptions().dtype(at::kFloat), false);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(4);
  for (auto& module : layer.modules) {
    auto& weight = module.projection.weight.defined() ? module.projection.weight : module.norm_weight;
    weight.normal_(0.0, 0.3, generator);
  }
  const LayerLayout layout(llama, config);
  auto& down = layer.modules[layout.slot(ModuleRole::kDown).module].projection.weight;
  auto& query = layer.modules[layout.slot(ModuleRole::kQuery).module].projection.weight;
  down.requires_grad_(true);
  query.requires_grad_(true);
  int calls = 0;
  bool mlp_done = false, attention_begun = true;
  const auto hidden = at::empty({1, 5, 16}).normal_(0.0, 1.0, generator).requires_grad_(true);
  run_layer(llama, config, layer, hidden, [&] {
    ++calls;
    mlp_done = down.grad().defined();
    attention_begun = query.grad().defined();
  }).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(mlp_done);
  EXPECT_FALSE(attention_begun);
  EXPECT_TRUE(query.grad().defined());
}

TEST(Architecture, FusedProjectionsComputeWhatSeparateOnesDo) {
  auto config = tiny_llama_config({32, 16, 24, 1, 4, 2, 8});
  config.rms_norm_eps = 1e-6;
  const auto& llama = *find_architecture_by_class("LlamaForCausalLM");
  const auto fused = fused_llama();
  const auto options = at::TensorOptions().dtype(at::kFloat);
  auto separate = make_decoder_layer(llama, config, options, false);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  for (auto& module : separate.modules) {
    auto& weight = module.projection.weight.defined() ? module.projection.weight : module.norm_weight;
    weight.normal_(0.0, 0.3, generator);
  }
  auto joined = make_decoder_layer(fused, config, options, false);
  const auto& s = separate.modules;  // norm, q, k, v, o, gate, up, down, norm
  at::NoGradGuard no_grad;
  joined.modules[0].norm_weight.copy_(s[0].norm_weight);
  joined.modules[1].projection.weight.copy_(
      at::cat({s[1].projection.weight, s[2].projection.weight, s[3].projection.weight}, 0));
  joined.modules[2].projection.weight.copy_(s[4].projection.weight);
  joined.modules[3].projection.weight.copy_(at::cat({s[5].projection.weight, s[6].projection.weight}, 0));
  joined.modules[4].projection.weight.copy_(s[7].projection.weight);
  joined.modules[5].norm_weight.copy_(s[8].norm_weight);
  const auto hidden = at::randn({2, 5, 16}, generator, options);
  const auto expected = run_layer(llama, config, separate, hidden);
  const auto actual = run_layer(fused, config, joined, hidden);
  EXPECT_TRUE(at::allclose(actual, expected, /*rtol=*/1e-6, /*atol=*/1e-6))
      << (actual - expected).abs().max().item<double>();
}

}  // namespace
}  // namespace finetune
