// RoPE scaling past the original context (issue 31): a tiny Llama with each rope type (default,
// linear, llama3, yarn with its attention-factor variants, dynamic NTK) gives transformers' fp32
// logits within 1e-5 relative on rows three times longer than the context its scaling starts at.
// Fixtures: tests/reference/make_long_rope_fixtures.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "../reference/tensor_fixtures.h"
#include "finetune/model/causal_lm.h"
#include "finetune/weights/model_weights.h"
#include "logits_against_fixture.h"

namespace finetune {
namespace {

using reference::TensorFixture;

TEST(LongRope, LogitsPastTheOriginalContextEqualTransformers) {
  const auto cases = reference::load_json_fixture("long_rope", "cases.json");
  std::set<std::string> types;
  for (const auto& [name, rope_type] : cases.items()) {
    SCOPED_TRACE("case " + name);
    const std::string dir = reference::fixture_path("long_rope", name);
    CausalLM model(load_model_config(dir), at::kFloat, at::kCPU);
    EXPECT_EQ(model.config().rope_scaling.rope_type, rope_type.get<std::string>());
    types.insert(model.config().rope_scaling.rope_type);
    load_weights(model, dir);
    const TensorFixture expected("long_rope", name + ".logits.safetensors");
    testing::expect_logits_match(model, expected, name);
  }
  EXPECT_EQ(types, (std::set<std::string>{"default", "linear", "llama3", "yarn", "dynamic"}));
}

// The short rows of a dynamic model keep the initial frequencies: a row's logits do not depend on
// whether a longer row came before (each forward's own length decides).
TEST(LongRope, DynamicFrequenciesFollowEachForwardsLength) {
  const std::string dir = reference::fixture_path("long_rope", "dynamic");
  CausalLM model(load_model_config(dir), at::kFloat, at::kCPU);
  load_weights(model, dir);
  const TensorFixture expected("long_rope", "dynamic.logits.safetensors");
  const auto& input_ids = expected["input_ids"];
  at::NoGradGuard no_grad;
  auto logits_of = [&](int64_t length) {
    const auto ids = input_ids.narrow(1, 0, length).contiguous();
    const auto positions = at::arange(length, at::kLong).unsqueeze(0).expand_as(ids).contiguous();
    return model.lm_head(model.forward_hidden(ids, positions, AttentionMask{}, ForwardOptions{}));
  };
  const auto short_first = logits_of(20);
  (void)logits_of(96);
  EXPECT_TRUE(at::equal(logits_of(20), short_first));
  EXPECT_FALSE(at::allclose(logits_of(40).narrow(1, 0, 20), short_first));  // 40 > 32: rescaled
}

}  // namespace
}  // namespace finetune
