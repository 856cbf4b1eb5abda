// The sequence-tiled MLP (Note [Sequence-tiled MLP]) gives the untiled path's loss and gradients,
// LoRA on gate/up/down included, with and without layer recompute; its backward replays each
// tile's dropout and accumulates each trained tensor once.
#include <gtest/gtest.h>

#include <memory>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "../lora/adapter_step_gradients.h"
#include "../model/tiny_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/sequence_tiling.h"
#include "finetune/train/loss.h"

namespace finetune {
namespace {

constexpr int64_t kIntermediate = 48;

class CountAccumulations : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit CountAccumulations(int* count) : count_(count) {}
  void operator()(const torch::autograd::Variable&) override { ++*count_; }

 private:
  int* count_;
};

double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

struct StepResult {
  at::Tensor loss;
  std::vector<at::Tensor> adapter_grads;
};

// One training step of a (2, 37) batch with a completions-style label mask.
StepResult training_step(CausalLM& model, bool checkpointing, int64_t mlp_tile_bytes) {
  for (auto& [name, tensor] : lora_parameters(model)) tensor.mutable_grad() = at::Tensor();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(4);
  auto ids = at::randint(0, 16, {2, 37}, generator, at::TensorOptions().dtype(at::kLong));
  auto labels = ids.clone();
  labels.narrow(1, 0, 10).fill_(-100);
  auto positions = at::arange(37, at::kLong).repeat({2, 1});
  ForwardOptions options;
  options.training = true;
  options.gradient_checkpointing = checkpointing;
  options.mlp_tile_bytes = mlp_tile_bytes;
  auto loss = causal_lm_loss_sum(model, model.forward_hidden(ids, positions, AttentionMask{}, options), labels);
  loss.backward();
  StepResult result{loss.detach(), {}};
  for (auto& [name, tensor] : lora_parameters(model)) result.adapter_grads.push_back(tensor.grad().clone());
  return result;
}

CausalLM lora_model() {
  CausalLM model(tiny_llama_config({16, 32, kIntermediate, 2, 4, 2, 8}), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  randomize_base(model, generator);
  LoraConfig lora;
  lora.r = 4;
  lora.lora_alpha = 8;
  lora.target_modules = {"q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"};
  attach_lora(model, lora, 1);
  for (auto& [name, tensor] : lora_parameters(model)) tensor.detach().normal_(0.0, 0.2, generator);
  return model;
}

TEST(SequenceTiling, TileTokensFollowTheByteBudget) {
  EXPECT_EQ(mlp_tile_tokens(12288, at::kBFloat16, kMlpTileBytes), 14563);  // 8B: 73,728 bytes a token
  EXPECT_EQ(mlp_tile_tokens(kIntermediate, at::kFloat, 10 * 3 * kIntermediate * 4), 10);
  EXPECT_EQ(mlp_tile_tokens(kIntermediate, at::kFloat, 1), 1);
}

TEST(SequenceTiling, TiledMlpGivesTheUntiledLossAndGradients) {
  CausalLM model = lora_model();
  const int64_t ten_tokens = 10 * 3 * kIntermediate * 4;  // 74 tokens: 8 tiles, the last of 4
  for (const bool checkpointing : {false, true}) {
    const auto untiled = training_step(model, checkpointing, kMlpTileBytes);
    const auto tiled = training_step(model, checkpointing, ten_tokens);
    EXPECT_NEAR(tiled.loss.item<double>(), untiled.loss.item<double>(), 1e-6 * untiled.loss.item<double>());
    ASSERT_EQ(tiled.adapter_grads.size(), untiled.adapter_grads.size());
    for (size_t i = 0; i < untiled.adapter_grads.size(); ++i) {
      EXPECT_GT(untiled.adapter_grads[i].abs().sum().item<double>(), 0.0) << "gradient " << i;
      EXPECT_LE(relative_difference(tiled.adapter_grads[i], untiled.adapter_grads[i]), 1e-6)
          << "gradient " << i << (checkpointing ? " with" : " without") << " checkpointing";
    }
  }
}

TEST(SequenceTiling, EvaluationForwardMatchesUntiled) {
  CausalLM model = lora_model();
  at::NoGradGuard no_grad;
  auto ids = at::randint(0, 16, {2, 37}, at::TensorOptions().dtype(at::kLong));
  auto positions = at::arange(37, at::kLong).repeat({2, 1});
  ForwardOptions tiled;
  tiled.mlp_tile_bytes = 7 * 3 * kIntermediate * 4;
  const auto expected = model.forward_hidden(ids, positions, AttentionMask{}, ForwardOptions{});
  const auto actual = model.forward_hidden(ids, positions, AttentionMask{}, tiled);
  EXPECT_LE(relative_difference(actual, expected), 1e-6);
}

// A per-token function with dropout and two trained tensors: the tiled node's gradients equal
// autograd through the same tiles run one after another (the same random draws), and each trained
// tensor's gradient is accumulated once.
TEST(SequenceTiling, BackwardReplaysEachTilesDropoutAndAccumulatesOnce) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(8);
  auto weight = at::empty({6, 5}).normal_(0.0, 1.0, generator).requires_grad_(true);
  auto bias = at::empty({6}).normal_(0.0, 1.0, generator).requires_grad_(true);
  auto x = at::empty({23, 5}).normal_(0.0, 1.0, generator).requires_grad_(true);
  const TokenFunction function = [&](const at::Tensor& rows) {
    return at::silu(at::linear(at::dropout(rows, 0.4, /*train=*/true), weight, bias));
  };
  // The DDP reducer's hook (ddp/grad_reducer.cpp) fires on each accumulation into .grad.
  int weight_accumulations = 0;
  torch::autograd::impl::set_post_acc_grad_hooks(weight, std::make_unique<CountAccumulations>(&weight_accumulations));
  seed_default_generator(21);
  auto tiled = tiled_token_call(function, x, 4, {weight, bias}, /*preserve_rng_state=*/true);
  auto upstream = at::empty({23, 6}).normal_(0.0, 1.0, generator);
  (tiled * upstream).sum().backward();
  EXPECT_EQ(weight_accumulations, 1);
  const auto tiled_grads = std::vector<at::Tensor>{x.grad().clone(), weight.grad().clone(), bias.grad().clone()};

  for (auto* t : {&x, &weight, &bias}) t->mutable_grad() = at::Tensor();
  seed_default_generator(21);
  std::vector<at::Tensor> tiles;
  for (int64_t start = 0; start < 23; start += 4) tiles.push_back(function(x.narrow(0, start, std::min<int64_t>(4, 23 - start))));
  auto reference = at::cat(tiles, 0);
  EXPECT_TRUE(at::equal(tiled.detach(), reference.detach()));
  (reference * upstream).sum().backward();
  const auto reference_grads = std::vector<at::Tensor>{x.grad(), weight.grad(), bias.grad()};
  for (size_t i = 0; i < reference_grads.size(); ++i) {
    EXPECT_LE(relative_difference(tiled_grads[i], reference_grads[i]), 1e-6) << "gradient " << i;
  }
}

}  // namespace
}  // namespace finetune
