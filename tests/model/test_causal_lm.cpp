// CausalLM on the CPU in fp32 against transformers: every fp32 tiny model of tiny_models.py
// (Llama with MHA/GQA, tied/untied, rope scalings; Qwen2's biases; Qwen3's q/k norms; Mistral with
// and without a window shorter than the rows; Gemma-2 with its soft-caps and alternating windows;
// Gemma-3 with local RoPE, q/k norms, and a multimodal checkpoint's text tower) gives the logits
// of its ForCausalLM class within 1e-5 relative (the bound of test_eval_parity.py). A packed
// padding-free row and KV-cached decoding past the window compute what separate full forwards do.
// Its layout reads the architecture table: parameter and projection names in HF order, and the
// output head the loss reads. Fixtures: tests/reference/make_model_fixtures.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "../reference/tensor_fixtures.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/kv_cache.h"
#include "finetune/weights/model_weights.h"
#include "logits_against_fixture.h"
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
    testing::expect_logits_match(model, expected, name);
  }
  EXPECT_EQ(architectures, (std::set<std::string>{"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                                  "MistralForCausalLM", "Phi3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                                                  "Gemma3ForConditionalGeneration"}));
}

double relative_difference(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want.to(at::kDouble)).norm() / want.to(at::kDouble).norm()).item<double>();
}

CausalLM load_case(const std::string& name) {
  const std::string dir = reference::fixture_path("model", "weights/" + name);
  CausalLM model(load_model_config(dir), at::kFloat, at::kCPU);
  load_weights(model, dir);
  return model;
}

at::Tensor positions(int64_t length) { return at::arange(length, at::kLong).unsqueeze(0); }

// Two samples in one padding-free row (the GPU's batch layout; on the CPU only the eager
// soft-capped path can run it, Note [Soft-capped attention]) against each sample alone: both
// longer than the sliding window.
TEST(CausalLM, PackedRowWithSoftCapAndWindowsEqualsSeparateRows) {
  for (const std::string name : {"gemma2", "gemma2_mha_untied"}) {
    SCOPED_TRACE(name);
    auto model = load_case(name);
    ASSERT_TRUE(model.config().attn_logit_softcapping.has_value());
    const TensorFixture fixture("model", "weights/" + name + ".logits.safetensors");
    const auto first = fixture["input_ids"][0];                 // (11)
    const auto second = fixture["input_ids"][1].narrow(0, 0, 8);  // (8)
    ASSERT_GT(8, *model.config().sliding_window);
    at::NoGradGuard no_grad;
    const auto packed_ids = at::cat({first, second}).unsqueeze(0);                         // (1, 19)
    const auto packed_positions = at::cat({positions(11), positions(8)}, 1);              // (1, 19)
    const auto mask = variable_length_mask({11, 8}, at::kCPU);
    const auto packed = model.lm_head(model.forward_hidden(packed_ids, packed_positions, mask, ForwardOptions{}));
    const auto alone_first = model.lm_head(model.forward_hidden(first.unsqueeze(0), positions(11), {}, {}));
    const auto alone_second = model.lm_head(model.forward_hidden(second.unsqueeze(0), positions(8), {}, {}));
    EXPECT_LE(relative_difference(packed.narrow(1, 0, 11), alone_first), 1e-6);
    EXPECT_LE(relative_difference(packed.narrow(1, 11, 8), alone_second), 1e-6);
  }
}

// Note [KV-cache forward] past the window: a prompt, a chunk after it (masked path) and single
// decode steps, each position's logits against the full forward's.
TEST(CausalLM, CachedDecodingPastTheWindowEqualsTheFullForward) {
  for (const std::string name : {"mistral_window", "gemma2", "gemma3", "gemma3_mqa_untied"}) {
    SCOPED_TRACE(name);
    auto model = load_case(name);
    const TensorFixture fixture("model", "weights/" + name + ".logits.safetensors");
    const auto ids = fixture["input_ids"];  // (2, 11)
    const int64_t length = ids.size(1);
    at::NoGradGuard no_grad;
    const auto full = model.lm_head(model.forward_hidden(ids, positions(length).expand({2, length}), {}, {}));
    auto cache = allocate_kv_cache(model.config(), 2, length, at::kFloat, at::kCPU);
    std::vector<at::Tensor> pieces;
    const std::vector<int64_t> chunks = {3, 4, 1, 1, 1, 1};
    int64_t start = 0;
    for (int64_t chunk : chunks) {
      const auto hidden = model.forward_cached(ids.narrow(1, start, chunk),
                                               (positions(chunk) + start).expand({2, chunk}), cache, at::Tensor());
      pieces.push_back(model.lm_head(hidden));
      start += chunk;
    }
    ASSERT_EQ(start, length);
    EXPECT_LE(relative_difference(at::cat(pieces, 1), full), 1e-5);
  }
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
