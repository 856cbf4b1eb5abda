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
