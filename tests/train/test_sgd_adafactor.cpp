// The other --optim updates against the optimizers HF's Trainer builds for them, on the fixture's
// fixed gradients with its learning rates (tests/reference/make_train_fixtures.py):
// - sgd: torch.optim.SGD(lr, weight_decay), single-tensor path: bit for bit (the same two ATen ops).
// - adafactor: transformers' Adafactor(lr, scale_parameter=False, relative_step=False,
//   weight_decay): bit for bit (its step's tensor ops in its order; factored for matrices and the
//   3-D tensor, plain for vectors).
// - paged_adamw_32bit (an alias of adamw_torch): bitsandbytes' PagedAdamW32bit (its CPU 32-bit
//   path) computes the same AdamW update in another order (m / (sqrt(v) + eps * c2) * lr * c2 / c1
//   against torch's m / (sqrt(v) / c2 + eps) * lr / c1), so within rounding: at most 4e-7 of the
//   parameter's magnitude after 7 steps (measured: the printed max_abs_error).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "../reference/tensor_fixtures.h"
#include "finetune/train/optimizer.h"

namespace finetune {
namespace {

using reference::max_abs_difference;
using reference::same_bits;
using reference::TensorFixture;

TEST(OtherOptimizers, StepsMatchTorchTransformersAndBitsandbytes) {
  const auto fixture = reference::load_json_fixture("train", "optimizers.json");
  ASSERT_EQ(fixture.at("cases").size(), 5u);
  double worst_paged = 0.0;
  for (const auto& c : fixture.at("cases")) {
    const std::string optim = c.at("optim");
    const double weight_decay = c.at("weight_decay");
    SCOPED_TRACE(optim + " weight_decay " + std::to_string(weight_decay));
    const TensorFixture tensors("train", c.at("file").get<std::string>());
    const int64_t count = c.at("parameter_count");
    std::vector<at::Tensor> parameters;
    for (int64_t i = 0; i < count; ++i) {
      parameters.push_back(tensors["param." + std::to_string(i) + ".initial"].clone().set_requires_grad(true));
    }
    AdamWOptions options;  // bnb's and HF's defaults: betas (0.9, 0.999), eps 1e-8
    options.weight_decay = weight_decay;
    const std::string name = optim == "paged_adamw_32bit" ? kAdamWTorchName : optim;
    auto optimizer = make_optimizer(name, parameters, options, /*fused=*/false);
    const auto lrs = c.at("lrs").get<std::vector<double>>();
    for (size_t step = 0; step < lrs.size(); ++step) {
      const std::string suffix = "." + std::to_string(step);
      for (int64_t i = 0; i < count; ++i) {
        parameters[i].mutable_grad() = tensors["grad." + std::to_string(i) + suffix].clone();
      }
      optimizer->step(lrs[step]);
      EXPECT_EQ(optimizer->steps_taken(), static_cast<int64_t>(step + 1));
      for (int64_t i = 0; i < count; ++i) {
        const auto& expected = tensors["param." + std::to_string(i) + suffix];
        const auto what = "parameter " + std::to_string(i) + " after step " + std::to_string(step);
        if (optim == "paged_adamw_32bit") {
          const double difference = max_abs_difference(parameters[i].detach(), expected);
          const double scale = expected.abs().max().item<double>();
          worst_paged = std::max(worst_paged, difference);
          EXPECT_LE(difference, 4e-7 * scale) << what;
        } else {
          EXPECT_TRUE(same_bits(parameters[i].detach(), expected))
              << what << ": max |diff| " << max_abs_difference(parameters[i].detach(), expected);
        }
      }
    }
    check_optimizer_state(optimizer->state(), name, parameters);
  }
  RecordProperty("paged_adamw_32bit_max_abs_error", std::to_string(worst_paged));
  std::cout << "paged_adamw_32bit vs bnb PagedAdamW32bit: max abs error " << worst_paged << "\n";
}

TEST(OtherOptimizers, StateLayoutsAndResumeContinueExactly) {
  at::manual_seed(5);
  const auto matrix = at::randn({6, 4}), vector = at::randn({5});
  // Adafactor: transformers' state names; a matrix's row and column statistics, a vector's own.
  const auto layout = optimizer_state_layout(kAdafactorName, matrix);
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0].field, "exp_avg_sq_row");
  EXPECT_EQ(layout[0].shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(layout[1].field, "exp_avg_sq_col");
  EXPECT_EQ(layout[1].shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(optimizer_state_layout(kAdafactorName, vector)[0].field, "exp_avg_sq");
  EXPECT_TRUE(optimizer_state_layout(kSgdName, matrix).empty());
  for (const std::string name : {kSgdName, kAdafactorName}) {
    SCOPED_TRACE(name);
    std::vector<at::Tensor> straight = {matrix.clone().set_requires_grad(true), vector.clone().set_requires_grad(true)};
    std::vector<at::Tensor> resumed = {matrix.clone().set_requires_grad(true), vector.clone().set_requires_grad(true)};
    AdamWOptions options;
    auto first = make_optimizer(name, straight, options, false);
    auto second = make_optimizer(name, resumed, options, false);
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < straight.size(); ++i) {
        const auto grad = at::randn_like(straight[i]);
        straight[i].mutable_grad() = grad.clone();
        resumed[i].mutable_grad() = grad.clone();
      }
      first->step(1e-2);
      if (step == 1) {  // a checkpoint's state continues in a fresh optimizer
        auto state = first->state();
        for (auto& parameter : state.parameters)
          for (auto& [field, tensor] : parameter) tensor = tensor.clone();
        for (size_t i = 0; i < straight.size(); ++i) resumed[i].detach().copy_(straight[i].detach());
        second = make_optimizer(name, resumed, options, false);
        second->load_state(state);
      } else if (step > 1) {
        second->step(1e-2);
      }
    }
    for (size_t i = 0; i < straight.size(); ++i) EXPECT_TRUE(same_bits(straight[i].detach(), resumed[i].detach())) << i;
    EXPECT_EQ(second->steps_taken(), 4);
  }
}

}  // namespace
}  // namespace finetune
