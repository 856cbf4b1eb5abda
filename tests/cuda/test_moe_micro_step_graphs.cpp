// Note [Graphed expert routing] (model/moe_block.h) on the GPU: a tiny bf16 Qwen3-MoE whose sizes
// and adapter ranks are multiples of 8 (every sparse layer runs grouped GEMMs) is graph-safe, and
// replaying its captured micro-steps trains bitwise what the same padded micro-steps compute
// eagerly: the router load-balancing loss and its aux_loss metric included, and with gradient
// checkpointing (the experts recomputed inside the graph). A size or a rank off the multiple of 8
// (the per-expert fallback reads the counts on the host) makes the model not graph-safe.
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include "finetune/data/batch.h"
#include "finetune/ddp/communicator.h"
#include "finetune/ddp/grad_reducer.h"
#include "finetune/io/model_config.h"
#include "finetune/launch/launch_env.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/expert_gemms.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/micro_step.h"
#include "finetune/train/micro_step_graphs.h"
#include "finetune/train/objective.h"
#include "graph_test_batches.h"
#include "random_lora_model.h"

namespace finetune {
namespace {

const at::Device kCuda(at::kCUDA, 0);

struct MoeCase {
  bool router_loss = true;
  bool gradient_checkpointing = false;
  int64_t moe_intermediate_size = 32;
  int64_t expert_rank = 8;
};

// Two layers, the second dense (mlp_only_layers), 8 experts, top-2; LoRA on attention, on the
// dense MLP and on both expert stacks, every lora_B random so the adapters change the output.
std::unique_ptr<CausalLM> random_moe_model(const MoeCase& c) {
  const nlohmann::json json = {
      {"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"vocab_size", 512},
      {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2}, {"head_dim", 16}, {"moe_intermediate_size", c.moe_intermediate_size},
      {"num_experts", 8}, {"num_experts_per_tok", 2}, {"norm_topk_prob", true}, {"mlp_only_layers", {1}},
      {"output_router_logits", c.router_loss}, {"router_aux_loss_coef", c.router_loss ? 0.01 : 0.0}};
  auto model = std::make_unique<CausalLM>(model_config_from_json(json, "config.json"), at::kBFloat16, kCuda);
  auto generator = at::cuda::detail::createCUDAGenerator();
  generator.set_current_seed(5);
  at::NoGradGuard no_grad;  // over attach_lora too
  testing::randomize_base_weights(*model, generator);
  LoraConfig lora;
  lora.r = c.expert_rank;
  lora.lora_alpha = 16;
  lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  lora.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  attach_lora(*model, lora, 3);
  testing::randomize_lora_b(*model, generator);
  return model;
}

struct Trace {
  std::vector<at::Tensor> losses;   // per micro-step, fp32
  std::vector<at::Tensor> metrics;  // per micro-step: the aux_loss sum (fp64), when the model adds it
  std::vector<at::Tensor> grads;    // per optimizer step, all LoRA gradients flattened (fp32)
  std::vector<at::Tensor> final_parameters;
  int64_t captured = 0, replays = 0;
};

// Two optimizer steps of 4 micro-steps, an SGD update between them. mode: 0 eager unpadded,
// 1 padded eagerly, 2 padded through graphs.
Trace train(const MoeCase& c, int mode) {
  auto model = random_moe_model(c);
  const NamedTensors trainable = lora_parameters(*model);
  auto communicator = make_communicator(LaunchEnv{}, kCuda, CommunicatorOptions{});
  GradReducer reducer(trainable, *communicator, GradReducerOptions{});
  ForwardOptions forward;
  forward.training = true;
  forward.gradient_checkpointing = c.gradient_checkpointing;
  const CausalLmObjective objective(model->config());
  std::unique_ptr<MicroStepGraphs> graphs;
  if (mode > 0) {
    MicroStepGraphsConfig config;
    config.capture = mode == 2;
    config.eager_warmup = 1;
    graphs = std::make_unique<MicroStepGraphs>(*model, forward, config, objective);
  }
  const auto batches = testing::graph_test_micro_batches();
  Trace trace;
  for (size_t step = 0; step < 2; ++step) {
    double tokens = 0;
    for (size_t i = 0; i < 4; ++i) tokens += static_cast<double>(batches[step * 4 + i].trainable_tokens);
    const auto global_tokens = at::full({}, tokens, at::TensorOptions().dtype(at::kFloat).device(kCuda));
    for (size_t i = 0; i < 4; ++i) {
      const HostBatch& host = batches[step * 4 + i];
      reducer.prepare_for_backward(i == 3);
      LossAndMetrics out;
      if (graphs) {
        out = graphs->run(host, global_tokens, at::Tensor(), reducer);
      } else {
        const auto batch = to_device(host, kCuda, BatchLayout::kFlatRowVariableLength);
        out = forward_backward_with_metrics(*model, micro_batch_inputs(batch), forward, objective, global_tokens,
                                            at::Tensor());
      }
      trace.losses.push_back(out.loss_sum.detach().to(at::kFloat).clone());
      if (out.metric_sums.defined()) trace.metrics.push_back(out.metric_sums.detach().clone());
    }
    reducer.finalize();
    std::vector<at::Tensor> flat;
    for (const auto& [name, tensor] : trainable) flat.push_back(tensor.grad().reshape({-1}).to(at::kFloat));
    trace.grads.push_back(at::cat(flat));
    at::NoGradGuard no_grad;
    for (const auto& [name, tensor] : trainable) tensor.detach().sub_(tensor.grad() * 0.5);
    reducer.zero_grad();
  }
  for (const auto& [name, tensor] : trainable) trace.final_parameters.push_back(tensor.detach().clone());
  if (graphs) {
    trace.captured = graphs->graphs_captured();
    trace.replays = graphs->replays();
  }
  graphs.reset();
  at::cuda::getCurrentCUDAStream().synchronize();
  return trace;
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

void expect_replays_equal_padded_eager(const MoeCase& c) {
  if (!grouped_gemms_sync_free(kCuda)) GTEST_SKIP() << "_grouped_mm reads its offsets on the host on this GPU";
  ASSERT_TRUE(random_moe_model(c)->cuda_graph_safe());
  const bool was_deterministic = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const Trace eager_a = train(c, 1);
  const Trace eager_b = train(c, 1);
  const Trace graphed = train(c, 2);
  at::globalContext().setDeterministicAlgorithms(was_deterministic, false);

  for (size_t s = 0; s < eager_a.grads.size(); ++s) ASSERT_TRUE(eager_a.grads[s].equal(eager_b.grads[s])) << s;
  EXPECT_EQ(graphed.captured, 3);
  EXPECT_EQ(graphed.replays, 7);
  ASSERT_EQ(graphed.metrics.size(), c.router_loss ? graphed.losses.size() : 0);
  ASSERT_EQ(graphed.metrics.size(), eager_a.metrics.size());
  for (size_t i = 0; i < graphed.losses.size(); ++i) {
    EXPECT_TRUE(graphed.losses[i].equal(eager_a.losses[i])) << "micro-step " << i;
    if (c.router_loss) {
      EXPECT_TRUE(graphed.metrics[i].equal(eager_a.metrics[i])) << "aux_loss, micro-step " << i;
    }
  }
  for (size_t s = 0; s < graphed.grads.size(); ++s) {
    EXPECT_TRUE(graphed.grads[s].equal(eager_a.grads[s]))
        << "step " << s << ": relative error " << relative_error(graphed.grads[s], eager_a.grads[s]);
  }
  for (size_t p = 0; p < graphed.final_parameters.size(); ++p) {
    EXPECT_TRUE(graphed.final_parameters[p].equal(eager_a.final_parameters[p])) << "parameter " << p;
  }
}

TEST(MoeMicroStepGraphs, ReplaysTrainBitwiseWhatThePaddedEagerStepsTrainWithTheRouterLoss) {
  expect_replays_equal_padded_eager(MoeCase{});
}

TEST(MoeMicroStepGraphs, ReplaysTrainBitwiseWhatThePaddedEagerStepsTrainWithCheckpointing) {
  MoeCase c;
  c.router_loss = false;
  c.gradient_checkpointing = true;
  expect_replays_equal_padded_eager(c);
}

TEST(MoeMicroStepGraphs, PaddedStepsTrainWhatUnpaddedStepsTrainToBf16Rounding) {
  if (!grouped_gemms_sync_free(kCuda)) GTEST_SKIP() << "_grouped_mm reads its offsets on the host on this GPU";
  const MoeCase c;
  const Trace unpadded = train(c, 0);
  const Trace graphed = train(c, 2);
  ASSERT_EQ(graphed.metrics.size(), unpadded.metrics.size());
  for (size_t i = 0; i < graphed.losses.size(); ++i) {
    EXPECT_LE(relative_error(graphed.losses[i], unpadded.losses[i]), 1e-2) << "micro-step " << i;
    // The filler sample's tokens are routed but not counted (graph_batch.h's token mask).
    EXPECT_LE(relative_error(graphed.metrics[i], unpadded.metrics[i]), 1e-2) << "aux_loss, micro-step " << i;
  }
  for (size_t s = 0; s < graphed.grads.size(); ++s) {
    const double error = relative_error(graphed.grads[s], unpadded.grads[s]);
    std::cout << "step " << s << ": graphed vs unpadded gradient relative error " << error << "\n";
    EXPECT_LE(error, 2e-2) << "step " << s;
  }
}

TEST(MoeMicroStepGraphs, SizesOrRanksOffTheMultipleOf8AreNotGraphSafe) {
  MoeCase narrow;
  narrow.moe_intermediate_size = 12;
  EXPECT_FALSE(random_moe_model(narrow)->cuda_graph_safe());
  MoeCase low_rank;
  low_rank.expert_rank = 4;
  EXPECT_FALSE(random_moe_model(low_rank)->cuda_graph_safe());
  EXPECT_EQ(random_moe_model(MoeCase{})->cuda_graph_safe(), grouped_gemms_sync_free(kCuda));
}

}  // namespace
}  // namespace finetune
