// Why micro-steps are not graphed (train/micro_step_graphs.h), on the CPU, which has no CUDA
// graphs: the objective's reason first, then the model's, then the kernels'.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "../model/tiny_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/lora/lora_adapter.h"
#include "finetune/train/dpo_objective.h"
#include "finetune/train/micro_step_graphs.h"
#include "finetune/train/orpo_objective.h"
#include "finetune/train/reference_adapters.h"

namespace finetune {
namespace {

std::unique_ptr<CausalLM> tiny_lora_model(double lora_dropout) {
  auto model = std::make_unique<CausalLM>(tiny_llama_config({64, 32, 64, 1, 2, 2, 16}), at::kFloat, at::kCPU);
  LoraConfig lora;
  lora.r = 4;
  lora.lora_alpha = 8;
  lora.lora_dropout = lora_dropout;
  lora.target_modules = {"q_proj", "v_proj"};
  attach_lora(*model, lora, /*random_state=*/0);
  return model;
}

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MicroStepGraphsSupported, SaysWhyAMicroStepIsNotGraphed) {
  auto model = tiny_lora_model(0.0);
  const OrpoObjective orpo(0.1);
  const CausalLmObjective causal_lm(model->config());
  const DpoObjective dpo_on_base_model(DpoLossConfig{}, *model);
  for (const Objective* objective : std::vector<const Objective*>{&orpo, &causal_lm, &dpo_on_base_model}) {
    EXPECT_TRUE(objective->graph_capturable()) << objective->name();
    EXPECT_FALSE(micro_step_graphs_supported(*model, *objective)) << objective->name();
    EXPECT_TRUE(mentions(micro_step_graphs_unsupported_reason(*model, *objective), "kernels have no CUDA graphs"))
        << objective->name();
  }
  auto with_dropout = tiny_lora_model(0.1);
  EXPECT_TRUE(mentions(micro_step_graphs_unsupported_reason(*with_dropout, orpo), "LoRA dropout"));

  // A DPO reference whose adapter draws dropout could not be replayed: the objective says so.
  auto adapter = std::make_unique<LoraAdapter>();
  adapter->lora_A = at::zeros({4, 32});
  adapter->lora_B = at::zeros({32, 4});
  adapter->dropout = 0.1;
  std::map<std::string, std::unique_ptr<LinearAdapter>> copy;
  copy.emplace("model.layers.0.self_attn.q_proj", std::move(adapter));
  ReferenceAdapters reference(std::move(copy));
  EXPECT_FALSE(reference.cuda_graph_safe());
  EXPECT_EQ(reference.adapters().size(), 1u);
  const DpoObjective dpo(DpoLossConfig{}, *model, reference);
  EXPECT_EQ(micro_step_graphs_unsupported_reason(*model, dpo), "the dpo objective cannot be captured");
  EXPECT_EQ(dpo.swapped_in_adapters().size(), 1u);
  EXPECT_TRUE(dpo_on_base_model.swapped_in_adapters().empty());
}

TEST(MicroStepGraphsSupported, ObjectivesNameTheSectionsTheyRead) {
  auto model = tiny_lora_model(0.0);
  const GraphSections causal_lm = CausalLmObjective(model->config()).graph_sections();
  EXPECT_FALSE(causal_lm.pairs || causal_lm.chosen_next_tokens);
  const GraphSections dpo = DpoObjective(DpoLossConfig{}, *model).graph_sections();
  EXPECT_TRUE(dpo.pairs);
  EXPECT_FALSE(dpo.chosen_next_tokens);
  const GraphSections orpo = OrpoObjective(0.1).graph_sections();
  EXPECT_TRUE(orpo.pairs && orpo.chosen_next_tokens);
}

TEST(MicroStepGraphsSupported, MixtureOfExpertsModelsGraphLongerMicroStepsUnlessOffloading) {
  ModelConfig dense = tiny_llama_config({64, 32, 64, 1, 2, 2, 16});
  EXPECT_EQ(default_graph_max_tokens(dense, false), 2048);
  EXPECT_EQ(default_graph_max_tokens(dense, true), 2048);
  ModelConfig sparse = dense;
  sparse.moe = MoeConfig{};
  sparse.moe->num_experts = 4;
  sparse.moe->num_experts_per_tok = 2;
  EXPECT_EQ(default_graph_max_tokens(sparse, false), 16384);
  EXPECT_EQ(default_graph_max_tokens(sparse, true), 2048);  // the offload arena is sized for it
}

}  // namespace
}  // namespace finetune
