// merged_parameters (checkpoint/merged_parameters.h), the list both merged exports start from: the
// model's parameters in named_parameters order, then the 4-bit projections' weights in name order;
// projections and expert stacks carry their module and the merged values, every other parameter is
// itself. A PEFT-adapted fp32 Llama (tests/reference/make_checkpoint_fixtures.py) and a 4-bit
// Mixtral with 4-bit expert stacks and a PEFT adapter on them (tests/reference/make_moe_fixtures.py).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "../reference/tensor_fixtures.h"
#include "finetune/checkpoint/adapter_io.h"
#include "finetune/checkpoint/merged_parameters.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/weights/model_weights.h"

namespace finetune {
namespace {

using reference::same_bits;

std::vector<std::string> names_of(const std::vector<MergedParameter>& parameters) {
  std::vector<std::string> names;
  for (const auto& parameter : parameters) names.push_back(parameter.name);
  return names;
}

TEST(MergedParameters, AdaptedProjectionsAreMergedAndOtherParametersAreThemselves) {
  const std::string base_dir = reference::fixture_path("checkpoint", "llama_fp32/base");
  const std::string adapter_dir = reference::fixture_path("checkpoint", "llama_fp32/adapter");
  CausalLM model(load_model_config(base_dir), at::kFloat, at::kCPU);
  load_weights(model, base_dir);
  attach_lora(model, read_adapter_config(adapter_dir), /*random_state=*/0);
  load_adapter_weights(model, adapter_dir);
  std::map<std::string, const Linear*> projection_of_weight;
  for (const auto& [name, linear] : model.named_linears()) projection_of_weight[name + ".weight"] = linear;

  const auto merged = merged_parameters(model);
  const auto parameters = model.named_parameters();
  ASSERT_EQ(merged.size(), parameters.size());
  int adapted = 0;
  for (size_t i = 0; i < merged.size(); ++i) {
    const auto& [name, parameter] = parameters[i];
    SCOPED_TRACE(name);
    ASSERT_EQ(merged[i].name, name);
    EXPECT_EQ(merged[i].shape, parameter.sizes().vec());
    EXPECT_EQ(merged[i].dtype, parameter.scalar_type());
    EXPECT_EQ(merged[i].expert_stack, nullptr);
    auto it = projection_of_weight.find(name);
    if (it == projection_of_weight.end()) {
      EXPECT_EQ(merged[i].projection, nullptr);
      EXPECT_TRUE(merged[i].values().is_same(parameter));
      continue;
    }
    const Linear& linear = *it->second;
    ASSERT_EQ(merged[i].projection, &linear);
    if (!linear.adapter) continue;
    ++adapted;
    EXPECT_TRUE(same_bits(merged[i].values(), linear.adapter->merged_weight(linear)));
    EXPECT_FALSE(same_bits(merged[i].values(), parameter));  // the update is folded in
  }
  EXPECT_GT(adapted, 0);
}

TEST(MergedParameters, FourBitProjectionsFollowTheParametersAndStacksAreMerged) {
  const std::string dir = reference::fixture_path("moe", "mixtral_top2");
  const std::string adapter_dir = reference::fixture_path("moe", "mixtral_top2_adapter_experts");
  CausalLM model(load_model_config(dir), at::kFloat, at::kCPU, /*projections_4bit=*/true);
  load_weights(model, dir);
  attach_lora(model, read_adapter_config(adapter_dir), /*random_state=*/0);
  load_adapter_weights(model, adapter_dir);
  std::map<std::string, const Linear*> projection_of_weight;  // name order
  for (const auto& [name, linear] : model.named_linears()) {
    ASSERT_TRUE(linear->is_4bit()) << name;
    projection_of_weight[name + ".weight"] = linear;
  }
  std::map<std::string, const ExpertStack*> expert_stacks;
  for (const auto& [name, stack] : model.named_expert_stacks()) expert_stacks[name] = stack;
  ASSERT_FALSE(expert_stacks.empty());

  std::vector<std::string> expected;
  for (const auto& [name, parameter] : model.named_parameters()) expected.push_back(name);
  for (const auto& [name, linear] : projection_of_weight) expected.push_back(name);
  const auto merged = merged_parameters(model);
  ASSERT_EQ(names_of(merged), expected);
  int adapted_stacks = 0;
  for (const auto& parameter : merged) {
    SCOPED_TRACE(parameter.name);
    if (auto it = projection_of_weight.find(parameter.name); it != projection_of_weight.end()) {
      const Linear& linear = *it->second;
      ASSERT_EQ(parameter.projection, &linear);
      EXPECT_EQ(parameter.shape, (std::vector<int64_t>{linear.out_features(), linear.in_features()}));
      EXPECT_EQ(parameter.dtype, linear.compute_dtype);
      const auto weight = linear.adapter ? linear.adapter->merged_weight(linear) : linear.dense_weight();
      EXPECT_TRUE(same_bits(parameter.values(), weight));
    } else if (auto stack = expert_stacks.find(parameter.name); stack != expert_stacks.end()) {
      ASSERT_EQ(parameter.expert_stack, stack->second);
      EXPECT_EQ(parameter.shape, stack->second->weight.sizes().vec());  // the meta weight's
      EXPECT_EQ(parameter.dtype, at::kFloat);
      EXPECT_TRUE(same_bits(parameter.values(), stack->second->merged_weight()));
      if (!stack->second->adapter) continue;
      ++adapted_stacks;
      EXPECT_FALSE(same_bits(parameter.values(), stack->second->dense_weight()));  // the update is folded in
    } else {
      EXPECT_EQ(parameter.projection, nullptr);
      EXPECT_EQ(parameter.expert_stack, nullptr);
    }
  }
  EXPECT_GT(adapted_stacks, 0);
}

}  // namespace
}  // namespace finetune
