// The mixture-of-experts block against closed forms: the router (softmax in fp32, top-k,
// norm_topk_prob, the dtype of the weights), the grouped expert computation against a per-token
// sum over its experts (with experts no token reaches, and with an expert adapter), the
// load-balancing loss against transformers' formula written out, and the checkpoint names of
// the expert stacks (Note [Expert tensors]).
#include <gtest/gtest.h>

#include <cmath>

#include "finetune/lora/expert_lora_adapter.h"
#include "finetune/lora/lora_config.h"
#include "finetune/util/errors.h"
#include "finetune/model/expert_gemms.h"
#include "finetune/model/moe_block.h"
#include "finetune/model/moe_names.h"

namespace finetune {
namespace {

MoeConfig moe_config(int64_t experts, int64_t top_k, bool norm) {
  MoeConfig config;
  config.num_experts = experts;
  config.num_experts_per_tok = top_k;
  config.moe_intermediate_size = 6;
  config.norm_topk_prob = norm;
  config.routing_weights_in_model_dtype = true;
  return config;
}

MoeLayer random_layer(int64_t experts, int64_t hidden, int64_t width) {
  MoeLayer layer;
  layer.sparse = true;
  layer.router = at::randn({experts, hidden}, at::kDouble);
  layer.gate_up_proj.weight = at::randn({experts, 2 * width, hidden}, at::kDouble) * 0.3;
  layer.down_proj.weight = at::randn({experts, hidden, width}, at::kDouble) * 0.3;
  return layer;
}

// sum_j w_tj down_e(silu(gate_e x_t) * up_e x_t), e = experts[t][j], one token at a time.
at::Tensor per_token_reference(const MoeLayer& layer, const at::Tensor& x, const Routing& routing,
                               const ExpertFactors* gate_up_update) {
  auto out = at::zeros_like(x);
  const int64_t width = layer.down_proj.in_features();
  for (int64_t t = 0; t < x.size(0); ++t) {
    for (int64_t j = 0; j < routing.experts.size(1); ++j) {
      const int64_t e = routing.experts[t][j].item<int64_t>();
      auto gate_up_weight = layer.gate_up_proj.weight[e];
      if (gate_up_update) gate_up_weight = gate_up_weight + at::matmul(gate_up_update->b[e], gate_up_update->a[e]) * gate_up_update->scaling;
      const auto h = at::matmul(gate_up_weight, x[t]);
      const auto activation = at::silu(h.narrow(0, 0, width)) * h.narrow(0, width, width);
      out[t] += routing.weights[t][j] * at::matmul(layer.down_proj.weight[e], activation);
    }
  }
  return out;
}

TEST(MoeBlock, RouterIsSoftmaxTopKAndOptionallyRenormalised) {
  at::manual_seed(0);
  const auto router = at::randn({5, 4}, at::kDouble);
  const auto x = at::randn({3, 4}, at::kDouble);
  const auto probabilities = at::softmax(at::matmul(x, router.t()), -1);
  const auto [top, index] = at::topk(probabilities, 2, -1);
  auto plain = route_tokens(router, x, moe_config(5, 2, false));
  EXPECT_TRUE(at::equal(plain.experts, index));
  EXPECT_TRUE(at::allclose(plain.weights.to(at::kDouble), top, 1e-6, 1e-7));
  EXPECT_EQ(plain.weights.scalar_type(), at::kDouble);  // the logits' dtype
  auto normed = route_tokens(router, x, moe_config(5, 2, true));
  EXPECT_TRUE(at::allclose(normed.weights.sum(-1), at::ones({3}, at::kDouble), 1e-6, 1e-7));
  auto config = moe_config(5, 2, true);
  config.routing_weights_in_model_dtype = false;  // Mixtral: fp32 weights
  EXPECT_EQ(route_tokens(router, x, config).weights.scalar_type(), at::kFloat);
}

TEST(MoeBlock, ExpertsEqualPerTokenSumWithUnreachedExperts) {
  at::manual_seed(1);
  const int64_t experts = 6, hidden = 8, width = 6;
  const auto layer = random_layer(experts, hidden, width);
  for (int64_t top_k : {1, 2}) {
    SCOPED_TRACE("top_k " + std::to_string(top_k));
    const auto config = moe_config(experts, top_k, top_k == 2);
    const auto x = at::randn({3, hidden}, at::kDouble);  // 3 tokens x top-k < 6 experts: some never reached
    const auto routing = route_tokens(layer.router, x, config);
    const auto reached = std::get<0>(at::_unique(routing.experts.flatten())).numel();
    EXPECT_LT(reached, experts);
    const auto got = experts_forward(layer, x, routing, config, KernelPolicy{});
    EXPECT_TRUE(at::allclose(got, per_token_reference(layer, x, routing, nullptr), 1e-10, 1e-12));
  }
}

TEST(MoeBlock, ExpertAdapterFollowsPeftLayout) {
  at::manual_seed(2);
  const int64_t experts = 3, hidden = 8, width = 6, rank = 2;
  auto layer = random_layer(experts, hidden, width);
  auto adapter = std::make_shared<ExpertLoraAdapter>();
  adapter->lora_A = at::randn({rank * experts, hidden}, at::kDouble);   // (r*E, in)
  adapter->lora_B = at::randn({2 * width, rank * experts}, at::kDouble);  // (out, r*E)
  adapter->num_experts = experts;
  adapter->scaling = 0.5;
  const auto factors = adapter->factors();
  for (int64_t e = 0; e < experts; ++e) {
    // PEFT: A.reshape(E, r, in)[e]; B.reshape(out, r, E)[:, :, e].
    EXPECT_TRUE(at::equal(factors.a[e], adapter->lora_A.narrow(0, e * rank, rank)));
    for (int64_t j = 0; j < rank; ++j)
      EXPECT_TRUE(at::equal(factors.b[e].select(1, j), adapter->lora_B.select(1, j * experts + e)));
  }
  layer.gate_up_proj.adapter = adapter;
  const auto config = moe_config(experts, 2, false);
  const auto x = at::randn({4, hidden}, at::kDouble);
  const auto routing = route_tokens(layer.router, x, config);
  const auto got = experts_forward(layer, x, routing, config, KernelPolicy{});
  EXPECT_TRUE(at::allclose(got, per_token_reference(layer, x, routing, &factors), 1e-10, 1e-12));
  const auto merged = layer.gate_up_proj.merged_weight();
  EXPECT_TRUE(at::allclose(merged[1], layer.gate_up_proj.weight[1] + at::matmul(factors.b[1], factors.a[1]) * 0.5,
                           1e-6, 1e-6));
}

TEST(MoeBlock, LoadBalancingLossIsTransformersFormula) {
  at::manual_seed(3);
  const int64_t experts = 4, top_k = 2, rows = 5;
  const std::vector<at::Tensor> logits = {at::randn({rows, experts}), at::randn({rows, experts})};
  const auto mask = at::tensor({1.f, 1.f, 0.f, 1.f, 0.f});
  for (bool masked : {false, true}) {
    SCOPED_TRACE(masked ? "masked" : "unmasked");
    at::Tensor counts = at::zeros({experts}), probability = at::zeros({experts});
    double counted = 0;
    for (const auto& layer_logits : logits) {
      const auto p = at::softmax(layer_logits, -1);
      const auto chosen = std::get<1>(at::topk(p, top_k, -1));
      for (int64_t r = 0; r < rows; ++r) {
        const float m = masked ? mask[r].item<float>() : 1.f;
        for (int64_t j = 0; j < top_k; ++j) counts[chosen[r][j].item<int64_t>()] += m;
        probability += p[r] * m;
        counted += m;
      }
    }
    const double expected = (counts / counted * (probability / counted)).sum().item<double>() * experts;
    const auto got = load_balancing_loss(logits, experts, top_k, masked ? mask : at::Tensor());
    EXPECT_NEAR(got.item<double>(), expected, 1e-6);
  }
}

TEST(MoeBlock, OnlyDenseLayersAreGraphSafeOffTheGpu) {
  // Note [Graphed expert routing]: a sparse layer needs grouped GEMMs on a GPU that reads their
  // offsets there (tests/cuda/test_moe_micro_step_graphs.cpp covers the GPU's answers).
  EXPECT_FALSE(moe_layer_graph_safe(random_layer(8, 16, 8), at::kCPU));
  EXPECT_FALSE(grouped_gemms_sync_free(at::kCPU));
  MoeLayer dense;
  EXPECT_TRUE(moe_layer_graph_safe(dense, at::kCPU));
}

TEST(MoeBlock, CheckpointPiecesNameEveryExpert) {
  ModelConfig config;
  config.hidden_size = 8;
  config.moe = moe_config(2, 1, false);
  config.moe->moe_intermediate_size = 6;
  const auto& mixtral = *find_architecture_by_class("MixtralForCausalLM");
  auto pieces = checkpoint_pieces(mixtral, config, "model.layers.1.mlp.experts.gate_up_proj");
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].name, "model.layers.1.block_sparse_moe.experts.0.w1.weight");
  EXPECT_EQ(pieces[1].name, "model.layers.1.block_sparse_moe.experts.0.w3.weight");
  EXPECT_EQ(pieces[1].row_begin, 6);
  EXPECT_EQ(pieces[3].expert, 1);
  pieces = checkpoint_pieces(mixtral, config, "model.layers.0.mlp.gate.weight");
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].name, "model.layers.0.block_sparse_moe.gate.weight");
  const auto& qwen = *find_architecture_by_class("Qwen3MoeForCausalLM");
  pieces = checkpoint_pieces(qwen, config, "model.layers.0.mlp.experts.down_proj");
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[1].name, "model.layers.0.mlp.experts.1.down_proj.weight");
  EXPECT_EQ(pieces[1].rows, 8);
  pieces = checkpoint_pieces(qwen, config, "model.layers.0.self_attn.q_proj.weight");
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].expert, -1);
  EXPECT_EQ(expert_adapter_prefix(0, 2), "base_layer.");
  EXPECT_EQ(expert_adapter_prefix(1, 2), "");
  EXPECT_EQ(expert_adapter_prefix(0, 1), "");
  EXPECT_TRUE(target_parameter_matches("model.layers.0.mlp.experts.down_proj", "mlp.experts.down_proj"));
  EXPECT_TRUE(target_parameter_matches("model.layers.0.mlp.experts.down_proj", "down_proj"));
  EXPECT_FALSE(target_parameter_matches("model.layers.0.mlp.experts.down_proj", "s.down_proj"));
}

TEST(MoeBlock, AdapterConfigCarriesTargetParameters) {
  LoraConfig config;
  config.target_modules = {"q_proj"};
  config.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  const auto json = adapter_config_json(config, "base");
  EXPECT_EQ(json["target_parameters"], nlohmann::json(config.target_parameters));
  EXPECT_EQ(lora_config_from_adapter_json(json, "adapter_config.json").target_parameters, config.target_parameters);
  EXPECT_TRUE(adapter_config_json(LoraConfig{}, "base")["target_parameters"].is_null());  // PEFT's None
  auto bad = json;
  bad["target_parameters"] = "mlp.experts.down_proj";
  EXPECT_THROW(lora_config_from_adapter_json(bad, "adapter_config.json"), Error);
}

}  // namespace
}  // namespace finetune
