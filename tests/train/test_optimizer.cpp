// The optimizer seam (train/optimizer.h): make_optimizer's dispatch by --optim name, the state
// layout each optimizer keeps (Note [Optimizer state layout]), check_optimizer_state's refusals
// naming parameter and field, and the version bump after a step (Note [Parameter versions after a
// step]). The update arithmetic itself is tested against torch and bitsandbytes in test_adamw.cpp
// and test_adamw_8bit.cpp.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "../test_support.h"
#include "finetune/train/optimizer.h"

namespace finetune {
namespace {

std::vector<at::Tensor> parameters_with_grads() {
  at::manual_seed(11);
  std::vector<at::Tensor> parameters = {at::randn({4, 8}).set_requires_grad(true), at::randn({8}).set_requires_grad(true)};
  for (auto& p : parameters) p.mutable_grad() = at::randn_like(p);
  return parameters;
}

TEST(Optimizer, MakesEachNamedOptimizerAndRefusesOthers) {
  for (const auto& name : optimizer_names()) {
    auto parameters = parameters_with_grads();
    auto optimizer = make_optimizer(name, parameters, AdamWOptions{}, /*fused=*/false);
    EXPECT_EQ(optimizer->steps_taken(), 0);
    optimizer->step(1e-3);
    EXPECT_EQ(optimizer->steps_taken(), 1);
    const auto state = optimizer->state();
    EXPECT_EQ(state.optimizer, name);
    EXPECT_EQ(state.steps, 1);
    ASSERT_EQ(state.parameters.size(), parameters.size());
    check_optimizer_state(state, name, parameters);  // its own state always passes
  }
  testing::expect_contains(testing::error_message([] {
                             make_optimizer("sgd_nesterov", parameters_with_grads(), AdamWOptions{}, false);
                           }),
                           {"unknown optimizer", "sgd_nesterov"});
}

TEST(Optimizer, StateLayoutIsEachOptimizersOwn) {
  const auto small = at::zeros({4, 8});
  using Layout = std::vector<std::tuple<std::string, std::vector<int64_t>, at::ScalarType>>;
  auto layout = [](const std::string& optimizer, const at::Tensor& parameter) {
    Layout out;
    for (const auto& spec : optimizer_state_layout(optimizer, parameter)) out.emplace_back(spec.field, spec.shape, spec.dtype);
    return out;
  };
  // torch's AdamW: both moments in the parameter's shape and dtype.
  EXPECT_EQ(layout(kAdamWTorchName, small), (Layout{{"exp_avg", {4, 8}, at::kFloat}, {"exp_avg_sq", {4, 8}, at::kFloat}}));
  EXPECT_EQ(layout(kAdamWTorchName, small.to(at::kBFloat16))[0], (Layout::value_type{"exp_avg", {4, 8}, at::kBFloat16}));
  // bitsandbytes' 8-bit AdamW: fp32 moments below min_8bit_size (4096), else uint8 codes and one
  // fp32 absmax per 256-element block.
  EXPECT_EQ(layout(kAdamW8bitName, small), (Layout{{"state1", {4, 8}, at::kFloat}, {"state2", {4, 8}, at::kFloat}}));
  EXPECT_EQ(layout(kAdamW8bitName, at::zeros({64, 65})),
            (Layout{{"state1", {64, 65}, at::kByte}, {"absmax1", {17}, at::kFloat},
                    {"state2", {64, 65}, at::kByte}, {"absmax2", {17}, at::kFloat}}));
  EXPECT_THROW(optimizer_state_layout("rmsprop", small), Error);
}

TEST(Optimizer, CheckRefusesAnotherOptimizersStateNamingWhatDiffers) {
  auto parameters = parameters_with_grads();
  auto adamw = make_optimizer(kAdamWTorchName, parameters, AdamWOptions{}, false);
  adamw->step(1e-3);
  const auto state = adamw->state();
  testing::expect_contains(
      testing::error_message([&] { check_optimizer_state(state, kAdamW8bitName, parameters); }),
      {"optimizer state of adamw_torch cannot continue as adamw_8bit"});

  auto wrong_shape = state;
  wrong_shape.parameters[1][0].second = at::zeros({3});
  testing::expect_contains(
      testing::error_message([&] { check_optimizer_state(wrong_shape, kAdamWTorchName, parameters); }),
      {"parameter 1", wrong_shape.parameters[1][0].first, "expected"});

  auto renamed = state;
  renamed.parameters[0][0].first = "momentum";
  testing::expect_contains(testing::error_message([&] { check_optimizer_state(renamed, kAdamWTorchName, parameters); }),
                           {"parameter 0", "'momentum'"});

  auto negative = state;
  negative.steps = -1;
  testing::expect_contains(
      testing::error_message([&] { check_optimizer_state(negative, kAdamWTorchName, parameters); }),
      {"negative step count"});
  EXPECT_THROW(adamw->load_state(negative), Error);
}

TEST(Optimizer, StepAdvancesParameterVersions) {
  for (const auto& name : optimizer_names()) {
    auto parameters = parameters_with_grads();
    std::vector<uint32_t> before;
    for (const auto& p : parameters) before.push_back(p._version());
    make_optimizer(name, parameters, AdamWOptions{}, false)->step(1e-3);
    for (size_t i = 0; i < parameters.size(); ++i) EXPECT_GT(parameters[i]._version(), before[i]) << name << " " << i;
  }
}

}  // namespace
}  // namespace finetune
