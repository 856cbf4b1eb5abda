// Weight loading against transformers: tiny models saved by save_pretrained (every architecture,
// biases, q/k norm, sharded, bf16) load into CausalLM, and every parameter equals the model's own
// state_dict() bit for bit, with nothing of that state dict left out. Tied embeddings: no separate
// lm_head parameter, the LM head is embed_tokens (and a checkpoint carrying a copy of it still
// loads). Fixtures: tests/reference/make_model_fixtures.py.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "../reference/tensor_fixtures.h"
#include "finetune/model/device_selection.h"
#include "finetune/weights/model_weights.h"

namespace finetune {
namespace {

using reference::same_bits;
using reference::TensorFixture;

// The fixture's cases whose embeddings are tied (or not).
std::vector<std::pair<std::string, std::string>> weight_cases(bool tied) {
  std::vector<std::pair<std::string, std::string>> cases;  // (name, dtype)
  const auto fixture = reference::load_json_fixture("model", "weights/cases.json");
  for (const auto& [name, c] : fixture.items()) {
    if (c.at("tied").get<bool>() == tied) cases.emplace_back(name, c.at("dtype").get<std::string>());
  }
  return cases;
}

// Loads one case and compares every parameter with HF's state dict; returns the model.
std::unique_ptr<CausalLM> load_and_compare(const std::string& name, const std::string& dtype) {
  SCOPED_TRACE("case " + name);
  const std::string dir = reference::fixture_path("model", "weights/" + name);
  auto model = std::make_unique<CausalLM>(load_model_config(dir), select_dtype(dtype, at::kCPU), at::kCPU);
  load_weights(*model, dir);
  const TensorFixture expected("model", "weights/" + name + ".expected.safetensors");
  std::set<std::string> compared;
  for (const auto& [parameter_name, parameter] : model->named_parameters()) {
    EXPECT_TRUE(same_bits(parameter, expected[parameter_name])) << parameter_name;
    compared.insert(parameter_name);
  }
  if (model->config().tie_word_embeddings) {
    EXPECT_TRUE(same_bits(model->lm_head_weight(), expected["lm_head.weight"])) << "lm_head.weight (tied)";
    compared.insert("lm_head.weight");
  }
  std::set<std::string> state_dict;
  for (const auto& [key, tensor] : expected.tensors()) state_dict.insert(key);
  EXPECT_EQ(compared, state_dict);
  return model;
}

TEST(Weights, UntiedModelsEqualTransformersStateDict) {
  const auto cases = weight_cases(/*tied=*/false);
  std::set<std::string> dtypes;
  for (const auto& [name, dtype] : cases) {
    auto model = load_and_compare(name, dtype);
    dtypes.insert(dtype);
    ASSERT_FALSE(model->config().tie_word_embeddings);
    EXPECT_EQ(model->named_parameters().back().first, "lm_head.weight") << name;
  }
  EXPECT_GE(cases.size(), 5u);  // llama, linear rope, qwen2 (q/k/v bias), mistral, sharded, bf16
  EXPECT_EQ(dtypes, (std::set<std::string>{"float32", "bfloat16"}));
}

TEST(Weights, TiedModelsUseEmbedTokensAsTheLmHead) {
  const auto cases = weight_cases(/*tied=*/true);
  bool checkpoint_with_lm_head = false;
  for (const auto& [name, dtype] : cases) {
    auto model = load_and_compare(name, dtype);
    ASSERT_TRUE(model->config().tie_word_embeddings);
    for (const auto& [parameter_name, parameter] : model->named_parameters()) {
      EXPECT_NE(parameter_name, "lm_head.weight") << name;
    }
    EXPECT_TRUE(model->lm_head_weight().is_same(model->named_parameters().front().second)) << name;
    checkpoint_with_lm_head |= name == "llama_tied_with_lm_head_copy";
  }
  EXPECT_GE(cases.size(), 3u);  // llama MHA, llama3 rope, qwen3 (q/k norm), lm_head copy
  EXPECT_TRUE(checkpoint_with_lm_head);
}

}  // namespace
}  // namespace finetune
