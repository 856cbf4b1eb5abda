// Activation offloading (Note [Activation offloading]) on the CPU, where its copies are plain
// copies: the same loss and gradients, bit for bit, as keeping the inputs, each input offloaded
// in forward order and restored in reverse, the next one prefetched once the layer's MLP has
// back-propagated, and the --offload_activations rule.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "../lora/adapter_step_gradients.h"
#include "../model/tiny_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/activation_offload.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/checkpoint_function.h"
#include "finetune/train/loss.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using Step = OffloadRecord::Step;

TEST(ActivationOffload, InputsAreOffloadedInOrderAndRestoredInReverseWithPrefetch) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(6);
  std::vector<at::Tensor> weights;
  for (int i = 0; i < 3; ++i) weights.push_back(at::empty({8, 8}).normal_(0.0, 0.5, generator).requires_grad_(true));
  const auto input = at::empty({2, 5, 8}).normal_(0.0, 1.0, generator);

  auto run = [&](const std::shared_ptr<ActivationOffloader>& offloader) {
    for (auto& weight : weights) weight.mutable_grad() = at::Tensor();
    auto hidden = input.clone().requires_grad_(true);
    for (const auto& weight : weights) {
      // The "MLP" is the tanh branch: after_mlp_backward runs when its input's gradient is complete.
      hidden = checkpointed_call(
          [weight](const at::Tensor& h, const std::function<void()>& after_mlp_backward) {
            auto product = at::matmul(h, weight);
            if (after_mlp_backward && product.requires_grad()) {
              product.register_hook([after_mlp_backward](const at::Tensor&) { after_mlp_backward(); });
            }
            return h + at::tanh(product);
          },
          hidden, /*preserve_rng_state=*/false, offloader);
    }
    hidden.square().sum().backward();
    std::vector<at::Tensor> grads;
    for (const auto& weight : weights) grads.push_back(weight.grad().clone());
    return grads;
  };
  const auto kept = run(nullptr);
  auto offloader = std::make_shared<ActivationOffloader>(at::Device(at::kCPU));
  const auto offloaded = run(offloader);
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_TRUE(at::equal(kept[i], offloaded[i])) << "weight " << i;

  // Each layer's input comes back at its restore or earlier, while the layer after it
  // back-propagates, once that layer's "MLP" has (the hook): after the later layer's restore.
  const std::vector<OffloadRecord> expected{
      {Step::kOffloaded, 0},  {Step::kOffloaded, 1}, {Step::kOffloaded, 2},    // forward
      {Step::kPrefetched, 2}, {Step::kRestored, 2},  {Step::kReleased, 2},     // layer 2
      {Step::kPrefetched, 1},                                                  // its "MLP" back-propagated
      {Step::kRestored, 1},   {Step::kReleased, 1},  {Step::kPrefetched, 0},   // layer 1: its input came early
      {Step::kRestored, 0},   {Step::kReleased, 0}};                           // layer 0
  EXPECT_EQ(offloader->trace(), expected);
  EXPECT_THROW(offloader->restore(1), Error);  // each input comes back once
}

// A LoRA model with dropout, trained one step with its checkpointed inputs kept and offloaded.
TEST(ActivationOffload, ModelGradientsAreBitwiseEqualWithOffloading) {
  CausalLM model(tiny_llama_config({16, 32, 48, 3, 4, 2, 8}), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(2);
  randomize_base(model, generator);
  attach_lora(model, small_lora(0.2, {"q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"}), 1);
  for (auto& [name, tensor] : lora_parameters(model)) tensor.detach().normal_(0.0, 0.2, generator);

  auto step = [&](std::optional<int64_t> offload_above_bytes, int64_t mlp_tile_bytes,
                  std::shared_ptr<const OffloadArena> arena = nullptr) {
    for (auto& [name, tensor] : lora_parameters(model)) tensor.mutable_grad() = at::Tensor();
    seed_default_generator(13);
    auto ids = at::tensor({3, 7, 1, 9, 4, 4, 8, 2, 6, 5, 1, 3}, at::kLong).view({2, 6});
    auto positions = at::arange(6, at::kLong).repeat({2, 1});
    ForwardOptions options;
    options.training = true;
    options.gradient_checkpointing = true;
    options.offload_activations_above_bytes = offload_above_bytes;
    options.mlp_tile_bytes = mlp_tile_bytes;
    options.offload_arena = arena;
    auto loss = causal_lm_loss_sum(model, model.forward_hidden(ids, positions, AttentionMask{}, options), ids);
    loss.backward();
    std::vector<at::Tensor> out{loss.detach()};
    for (auto& [name, tensor] : lora_parameters(model)) out.push_back(tensor.grad().clone());
    return out;
  };
  const int64_t four_tokens = 4 * 3 * 48 * 4;  // the sequence-tiled MLP inside an offloaded recompute too
  for (const int64_t mlp_tile_bytes : {kMlpTileBytes, four_tokens}) {
    const auto kept = step(std::nullopt, mlp_tile_bytes);
    const auto offloaded = step(0, mlp_tile_bytes);
    const auto below_threshold = step(int64_t{1} << 40, mlp_tile_bytes);  // auto's rule, inputs too small: kept
    // Note [Offload arena]: one arena for two forwards in a row (as graphs share it), each filling it from 0.
    const auto arena = std::make_shared<OffloadArena>(at::Device(at::kCPU), offload_arena_bytes(12, 32, 3, at::kFloat));
    const auto in_arena = step(0, mlp_tile_bytes, arena);
    const auto in_arena_again = step(0, mlp_tile_bytes, arena);
    ASSERT_EQ(kept.size(), offloaded.size());
    for (size_t i = 0; i < kept.size(); ++i) {
      EXPECT_TRUE(at::equal(kept[i], offloaded[i])) << "tensor " << i;
      EXPECT_TRUE(at::equal(kept[i], below_threshold[i])) << "tensor " << i;
      EXPECT_TRUE(at::equal(kept[i], in_arena[i])) << "tensor " << i;
      EXPECT_TRUE(at::equal(kept[i], in_arena_again[i])) << "tensor " << i;
    }
  }
}

// Note [Offload arena]: slots follow each other from offset 0 at aligned starts, hold the inputs'
// values, come back in reverse order as without an arena, and a forward that outgrows the arena
// is an error naming the bytes.
TEST(ActivationOffload, ArenaSlotsFollowEachOtherAndBoundTheForward) {
  EXPECT_EQ(offload_arena_bytes(5, 3, 2, at::kBFloat16), 2 * kOffloadSlotAlignment);  // 30 bytes a slot, aligned
  EXPECT_EQ(offload_arena_bytes(2048, 4096, 36, at::kBFloat16), int64_t{36} * 2048 * 4096 * 2);  // Qwen3-8B's 0.60 GB
  const auto arena = std::make_shared<OffloadArena>(at::Device(at::kCPU), offload_arena_bytes(7, 4, 2, at::kFloat));
  ActivationOffloader offloader(at::Device(at::kCPU), arena);
  const auto first = at::arange(28, at::kFloat).view({7, 4});
  const auto second = first * 2;
  EXPECT_EQ(offloader.offload(first), 0u);
  offloader.finish_offload(0);
  EXPECT_EQ(offloader.offload(second), 1u);
  offloader.finish_offload(1);
  EXPECT_TRUE(at::equal(arena->view(0, {7, 4}, at::kFloat), first));
  EXPECT_TRUE(at::equal(arena->view(kOffloadSlotAlignment, {7, 4}, at::kFloat), second));
  EXPECT_TRUE(at::equal(offloader.restore(1), second));
  EXPECT_TRUE(at::equal(offloader.restore(0), first));
  try {
    ActivationOffloader(at::Device(at::kCPU), arena).offload(at::zeros({3, 7, 20}));
    FAIL() << "an input larger than the arena";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("1680 bytes at offset 0 do not fit its 1024 bytes"), std::string::npos) << message;
  }
}

TEST(ActivationOffload, OptionDecidesTheThreshold) {
  const at::Device cpu(at::kCPU), cuda(at::kCUDA, 0);  // only compared, never allocated on
  EXPECT_EQ(offload_above_bytes(OffloadActivations::kOn, cpu), 0);  // the bookkeeping with plain copies
  EXPECT_EQ(offload_above_bytes(OffloadActivations::kOn, cuda), 0);
  EXPECT_FALSE(offload_above_bytes(OffloadActivations::kOff, cuda).has_value());
  EXPECT_EQ(offload_above_bytes(OffloadActivations::kAuto, cuda), 0);
  EXPECT_FALSE(offload_above_bytes(OffloadActivations::kAuto, cpu).has_value());
  EXPECT_EQ(offload_activations_from_name("auto"), OffloadActivations::kAuto);
  EXPECT_EQ(offload_activations_from_name("true"), OffloadActivations::kOn);
  EXPECT_EQ(offload_activations_from_name("false"), OffloadActivations::kOff);
}

}  // namespace
}  // namespace finetune
