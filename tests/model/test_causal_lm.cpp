// CausalLM on the CPU in fp32 against transformers: every fp32 tiny model of tiny_models.py
// (Llama with MHA/GQA, tied/untied, rope scalings; Qwen2's biases; Qwen3's q/k norms; Mistral)
// gives the logits of its ForCausalLM class within 1e-5 relative (the bound of test_eval_parity.py).
// Its layout reads the architecture table: parameter and projection names in HF order, and the
// output head the loss reads. Fixtures: tests/reference/make_model_fixtures.py.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "../reference/tensor_fixtures.h"
#include "finetune/model/causal_lm.h"
#include "finetune/weights/model_weights.h"
#include "tiny_config.h"

namespace finetune {
namespace {

using reference::TensorFixture;

std::vector<std::string> logits_cases() {
  std::vector<std::string> cases;
  const auto fixture = reference::load_json_fixture("model", "weights/cases.json");
  for (const auto& [name, c] : fixture.items()) {
    if (c.value("logits", false)) cases.push_back(name);
  }
  return cases;
}

TEST(CausalLM, LogitsEqualTransformersForEveryFamily) {
  const auto cases = logits_cases();
  std::set<std::string> architectures;
  for (const auto& name : cases) {
    SCOPED_TRACE("case " + name);
    const std::string dir = reference::fixture_path("model", "weights/" + name);
    CausalLM model(load_model_config(dir), at::kFloat, at::kCPU);
    load_weights(model, dir);
    architectures.insert(model.config().architecture);
    const TensorFixture expected("model", "weights/" + name + ".logits.safetensors");
    const auto& input_ids = expected["input_ids"];  // (B, T)
    const auto position_ids = at::arange(input_ids.size(1), at::kLong).unsqueeze(0).expand_as(input_ids).contiguous();
    at::NoGradGuard no_grad;
    const auto hidden = model.forward_hidden(input_ids, position_ids, AttentionMask{}, ForwardOptions{});
    const auto logits = model.lm_head(hidden);  // (B, T, V)
    const auto& reference_logits = expected["logits"];
    ASSERT_TRUE(logits.sizes().equals(reference_logits.sizes()));
    const double relative =
        ((logits.to(at::kDouble) - reference_logits.to(at::kDouble)).norm() / reference_logits.to(at::kDouble).norm())
            .item<double>();
    EXPECT_LE(relative, 1e-5);
  }
  EXPECT_EQ(architectures, (std::set<std::string>{"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                                  "MistralForCausalLM", "Phi3ForCausalLM"}));
}

TEST(CausalLM, NamesFollowTheArchitectureTable) {
  auto config = tiny_llama_config({32, 16, 24, 2, 2, 1, 8});
  config.architecture = "Qwen3ForCausalLM";
  config.model_type = "qwen3";
  config.qk_norm = true;
  config.tie_word_embeddings = true;
  const CausalLM model(config, at::kFloat, at::kCPU);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : model.named_parameters()) names.push_back(name);
  ASSERT_EQ(names.size(), 2u + 2 * 11);
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  EXPECT_EQ(names[1], "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(names[5], "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(names[6], "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(names[11], "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(names[12], "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(names.back(), "model.norm.weight");  // tied: no lm_head.weight
  std::vector<std::string> linears;
  for (const auto& [name, linear] : model.named_linears()) linears.push_back(name);
  ASSERT_EQ(linears.size(), 14u);
  EXPECT_EQ(linears[0], "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(linears[6], "model.layers.0.mlp.down_proj");
  EXPECT_EQ(linears[7], "model.layers.1.self_attn.q_proj");
  EXPECT_EQ(&model.architecture(), find_architecture_by_class("Qwen3ForCausalLM"));
}

TEST(CausalLM, OutputHeadIsTheLmHeadWithoutSoftCapForTheseFamilies) {
  auto config = tiny_llama_config({32, 16, 24, 1, 2, 2, 8});
  for (const bool tied : {false, true}) {
    config.tie_word_embeddings = tied;
    CausalLM model(config, at::kFloat, at::kCPU);
    for (auto& [name, tensor] : model.named_parameters()) tensor.normal_();
    const auto head = model.output_head();
    EXPECT_TRUE(head.weight.is_same(model.lm_head_weight()));
    EXPECT_FALSE(head.final_logit_softcapping.has_value());
    const auto hidden = at::randn({2, 3, 16});
    EXPECT_TRUE(at::equal(model.lm_head(hidden), at::linear(hidden, head.weight)));
  }
}

}  // namespace
}  // namespace finetune
