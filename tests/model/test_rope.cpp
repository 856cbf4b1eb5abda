// RoPE against transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb, fp32, for default,
// "linear" and "llama3" scaling (a tiny head_dim whose frequencies fall in all three llama3
// bands, and Llama-3.1's own parameters at head_dim 128): inverse frequencies, cos/sin tables and
// the rotated q and k, all bit for bit (Note [RoPE bit-exactness] in src/model/rope.cpp: the same
// ops in the same order). HF rotates (B, H, T, D); apply_rope takes (B, T, H, D), so the fixture's
// q, k and results are transposed here. Fixtures: tests/reference/make_model_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "../reference/tensor_fixtures.h"
#include "finetune/model/rope.h"

namespace finetune {
namespace {

using reference::max_abs_difference;
using reference::same_bits;
using reference::TensorFixture;

struct RopeCase {
  std::string name;
  ModelConfig config;
  TensorFixture tensors;
};

std::vector<RopeCase> rope_cases() {
  std::vector<RopeCase> cases;
  std::set<std::string> types;
  const auto fixture = reference::load_json_fixture("model", "rope/cases.json");
  for (const auto& [name, rope_type] : fixture.items()) {
    auto config = load_model_config(reference::fixture_path("model", "rope/" + name));
    EXPECT_EQ(config.rope_scaling.rope_type, rope_type.get<std::string>()) << name;
    types.insert(config.rope_scaling.rope_type);
    cases.push_back({name, config, TensorFixture("model", "rope/" + name + ".safetensors")});
  }
  EXPECT_EQ(types, (std::set<std::string>{"default", "linear", "llama3"}));
  return cases;
}

TEST(Rope, InverseFrequenciesMatchTransformers) {
  double worst = 0.0;
  for (const auto& c : rope_cases()) {
    const auto inv_freq = rope_inverse_frequencies(c.config, at::kCPU);
    EXPECT_TRUE(same_bits(inv_freq, c.tensors["inv_freq"])) << c.name;
    worst = std::max(worst, max_abs_difference(inv_freq, c.tensors["inv_freq"]));
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

TEST(Rope, TablesMatchTransformers) {
  double worst = 0.0;
  for (const auto& c : rope_cases()) {
    // From HF's own inv_freq, so a frequency mismatch is reported by the test above only.
    const auto tables = rope_tables(c.tensors["inv_freq"], c.tensors["position_ids"], at::kFloat);  // (B, T, D)
    EXPECT_TRUE(same_bits(tables.cos, c.tensors["cos"])) << c.name << " cos";
    EXPECT_TRUE(same_bits(tables.sin, c.tensors["sin"])) << c.name << " sin";
    worst = std::max({worst, max_abs_difference(tables.cos, c.tensors["cos"]),
                      max_abs_difference(tables.sin, c.tensors["sin"])});
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

TEST(Rope, ApplyRopeMatchesApplyRotaryPosEmb) {
  double worst = 0.0;
  for (const auto& c : rope_cases()) {
    const RopeTables tables{c.tensors["cos"], c.tensors["sin"]};
    for (const std::string x : {"q", "k"}) {
      // HF (B, H, T, D) -> ours (B, T, H, D), contiguous like the projection's output.
      const auto input = c.tensors[x].transpose(1, 2).contiguous();
      const auto rotated = apply_rope(input, tables, /*fused_kernel=*/false).transpose(1, 2);  // back to (B, H, T, D)
      EXPECT_TRUE(same_bits(rotated.contiguous(), c.tensors[x + "_embed"])) << c.name << " " << x;
      worst = std::max(worst, max_abs_difference(rotated, c.tensors[x + "_embed"]));
    }
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

}  // namespace
}  // namespace finetune

namespace finetune {
namespace {

// Phi-4-mini's layout at a tiny size: head_dim 16, partial_rotary_factor 0.75 (12 rotary dims),
// longrope with original_max_position_embeddings 4096 and max_position_embeddings 131072.
ModelConfig phi4_mini_like() {
  ModelConfig config;
  config.head_dim = 16;
  config.partial_rotary_factor = 0.75;
  config.rope_theta = 10000.0;
  config.max_position_embeddings = 131072;
  config.rope_scaling.rope_type = "longrope";
  config.rope_scaling.short_factor = {1.0, 1.5, 2.0, 2.5, 3.0, 3.5};
  config.rope_scaling.long_factor = {4.0, 5.0, 6.0, 7.0, 8.0, 9.0};
  config.rope_scaling.original_max_position_embeddings = 4096;
  config.rope_scaling.factor = 32.0;
  return config;
}

// Values printed by transformers' _compute_longrope_parameters for the same config (fp32).
TEST(Rope, LongropeFrequenciesAndAttentionFactorMatchTransformers) {
  const ModelConfig config = phi4_mini_like();
  EXPECT_EQ(rope_rotary_dim(config), 12);
  const std::vector<float> short_expected = {1.0f, 0.14362896978855133f, 0.02320794202387333f,
                                             0.004000000189989805f, 0.0007181447581388056f, 0.00013261684216558933f};
  const std::vector<float> long_expected = {0.25f, 0.04308868944644928f, 0.007735980208963156f,
                                            0.0014285714132711291f, 0.0002693042915780097f, 5.157322084414773e-05f};
  const auto short_freq = longrope_inverse_frequencies(config, at::kCPU, false);
  const auto long_freq = longrope_inverse_frequencies(config, at::kCPU, true);
  ASSERT_EQ(short_freq.numel(), 6);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(short_freq[i].item<float>(), short_expected[i]) << i;
    EXPECT_EQ(long_freq[i].item<float>(), long_expected[i]) << i;
  }
  EXPECT_TRUE(rope_inverse_frequencies(config, at::kCPU).equal(short_freq));  // the table built at init
  EXPECT_DOUBLE_EQ(rope_attention_scaling(config), 1.1902380714238083);  // sqrt(1 + ln 32 / ln 4096)
  ModelConfig given = config;
  given.rope_scaling.attention_factor = 1.25;
  EXPECT_DOUBLE_EQ(rope_attention_scaling(given), 1.25);
}

// The long table is used once max(position_ids) + 1 exceeds original_max_position_embeddings;
// cos and sin carry the attention factor.
TEST(Rope, LongropeSwitchesTablesPastTheOriginalLength) {
  ModelConfig config = phi4_mini_like();
  config.rope_scaling.original_max_position_embeddings = 8;
  const RopeFrequencies frequencies = rope_frequencies(config, at::kCPU);
  const double scale = frequencies.attention_scaling;
  const auto within = at::arange(8).unsqueeze(0);   // max + 1 = 8: short
  const auto beyond = at::arange(9).unsqueeze(0);   // max + 1 = 9: long
  const auto short_tables = rope_tables(frequencies, within, at::kFloat);
  const auto long_tables = rope_tables(frequencies, beyond, at::kFloat);
  EXPECT_TRUE(short_tables.cos.equal(rope_tables(frequencies.inv_freq, within, at::kFloat, scale).cos));
  EXPECT_TRUE(long_tables.sin.equal(rope_tables(frequencies.long_inv_freq, beyond, at::kFloat, scale).sin));
  EXPECT_FALSE(long_tables.cos.narrow(1, 0, 8).equal(short_tables.cos));
  EXPECT_EQ(short_tables.cos.size(-1), 12);
}

// Partial rotary rotates the first rotary_dim dims and passes the rest through unchanged.
TEST(Rope, PartialRotaryPassesTheTailThrough) {
  const ModelConfig config = phi4_mini_like();
  const auto tables = rope_tables(rope_frequencies(config, at::kCPU), at::arange(5).unsqueeze(0), at::kFloat);
  const auto x = at::randn({1, 5, 2, 16});
  const auto y = apply_rope(x, tables, /*fused_kernel=*/false);
  EXPECT_TRUE(y.narrow(-1, 12, 4).equal(x.narrow(-1, 12, 4)));
  EXPECT_TRUE(y.narrow(-1, 0, 12).equal(apply_rope(x.narrow(-1, 0, 12).contiguous(), tables, false)));
}

}  // namespace
}  // namespace finetune
