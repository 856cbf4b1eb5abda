// AdamW's CPU path against torch.optim.AdamW (single-tensor, the CPU default): the fixture's
// gradients are fed step by step with its learning rates, and after every step every parameter
// must equal torch's bit for bit. Exact, not approximate, because the CPU path is the same
// arithmetic: _single_tensor_adam's tensor ops in its order (mul_, lerp_, mul_().addcmul_, sqrt,
// div, add_, addcdiv_) on fp32, with the same double scalars (1 - beta ** step is Python's float
// pow, i.e. the C library's pow, as std::pow is). The moments are private to AdamW; a wrong moment
// shows up in the next parameter update. Fixtures: tests/reference/make_train_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../reference/tensor_fixtures.h"
#include "adamw_case.h"
#include "finetune/lora/half_precision_lora_linear.h"
#include "finetune/lora/lora_adapter.h"
#include "finetune/lora/lora_kernels.h"
#include "finetune/train/adamw.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using reference::max_abs_difference;
using reference::same_bits;
using reference::TensorFixture;

TEST(AdamW, CpuStepsMatchTorchAdamWBitForBit) {
  const auto fixture = reference::load_json_fixture("train", "adamw.json");
  ASSERT_EQ(fixture.at("cases").size(), 2u);
  double worst = 0.0;
  for (const auto& c : fixture.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE("case " + name);
    const TensorFixture tensors("train", "adamw_" + name + ".safetensors");
    const int64_t count = c.at("parameter_count");
    ASSERT_GE(count, 4);
    std::vector<at::Tensor> parameters;
    for (int64_t i = 0; i < count; ++i) {
      parameters.push_back(tensors["param." + std::to_string(i) + ".initial"].clone().set_requires_grad(true));
    }
    const AdamWOptions options = testing::adamw_options_of(c);
    ASSERT_GT(options.weight_decay, 0.0);
    AdamW optimizer(parameters, options, /*fused=*/false);

    const auto lrs = c.at("lrs").get<std::vector<double>>();
    ASSERT_GE(lrs.size(), 5u);
    for (size_t step = 0; step < lrs.size(); ++step) {
      const std::string suffix = "." + std::to_string(step);
      for (int64_t i = 0; i < count; ++i) {
        parameters[i].mutable_grad() = tensors["grad." + std::to_string(i) + suffix].clone();
      }
      optimizer.step(lrs[step]);
      EXPECT_EQ(optimizer.steps_taken(), static_cast<int64_t>(step + 1));
      for (int64_t i = 0; i < count; ++i) {
        const auto& expected = tensors["param." + std::to_string(i) + suffix];
        EXPECT_TRUE(same_bits(parameters[i].detach(), expected))
            << "parameter " << i << " " << expected.sizes() << " after step " << step << " (lr " << lrs[step] << ")";
        worst = std::max(worst, max_abs_difference(parameters[i].detach(), expected));
      }
    }
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

// Resuming: an optimizer loaded with another's state (moments and step count) continues bit for bit.
TEST(AdamW, LoadedStateContinuesBitForBit) {
  at::manual_seed(4);
  const std::vector<at::Tensor> initial = {at::randn({3, 5}), at::randn({7})};
  std::vector<std::vector<at::Tensor>> grads;
  for (int step = 0; step < 6; ++step) grads.push_back({at::randn({3, 5}), at::randn({7})});
  auto run = [&](std::vector<at::Tensor>& parameters, AdamW& optimizer, int from, int to) {
    for (int step = from; step < to; ++step) {
      for (size_t i = 0; i < parameters.size(); ++i) parameters[i].mutable_grad() = grads[step][i].clone();
      optimizer.step(1e-2 * (step + 1));
    }
  };
  auto make = [&] {
    std::vector<at::Tensor> parameters;
    for (const auto& t : initial) parameters.push_back(t.clone().set_requires_grad(true));
    return parameters;
  };
  auto straight = make();
  AdamW uninterrupted(straight, AdamWOptions{}, false);
  run(straight, uninterrupted, 0, 6);

  auto first = make();
  AdamW before(first, AdamWOptions{}, false);
  run(first, before, 0, 3);
  std::vector<at::Tensor> continued;
  for (const auto& p : first) continued.push_back(p.detach().clone().set_requires_grad(true));
  AdamW after(continued, AdamWOptions{}, false);
  after.load_state(before.state());
  run(continued, after, 3, 6);
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_TRUE(at::equal(continued[i], straight[i])) << i;
  EXPECT_EQ(after.steps_taken(), 6);
  auto too_few = before.state();
  too_few.parameters.pop_back();
  EXPECT_THROW(after.load_state(too_few), Error);
  auto other_shape = before.state();
  other_shape.parameters[0][1].second = at::zeros({5, 3});
  EXPECT_THROW(after.load_state(other_shape), Error);
}

// Note [Parameter versions after a step]: ATen's _fused_adamw_ (the CUDA path's optimizer; the
// CPU has the same operator) writes the parameters without advancing their version counters. The
// half-precision LoRA operands are cached while lora_A/lora_B keep their versions, so without the
// bump every forward after the first would read the initial adapter.
TEST(AdamW, FusedStepRefreshesTheHalfPrecisionLoraOperands) {
  LoraAdapter adapter;
  adapter.lora_A = at::randn({4, 8}).requires_grad_(true);
  adapter.lora_B = at::randn({6, 4}).requires_grad_(true);
  adapter.lora_A.mutable_grad() = at::randn({4, 8});
  adapter.lora_B.mutable_grad() = at::randn({6, 4});
  const auto before = half_precision_operands(adapter, at::kBFloat16);
  const at::Tensor A_split_before = before->A_split.clone();
  const int64_t version_before = adapter.lora_A._version();
  auto optimizer = make_optimizer("adamw_torch", {adapter.lora_A, adapter.lora_B}, AdamWOptions{}, /*fused=*/true);
  optimizer->step(0.1);
  EXPECT_GT(adapter.lora_A._version(), version_before);
  const auto after = half_precision_operands(adapter, at::kBFloat16);
  EXPECT_FALSE(after->A_split.equal(A_split_before));
  EXPECT_TRUE(after->A_split.equal(split_hi_lo(adapter.lora_A.detach(), at::kBFloat16, 0)));
  EXPECT_TRUE(after->B_split.equal(split_hi_lo(adapter.lora_B.detach(), at::kBFloat16, 1)));
  // Refreshed in place, at the addresses a CUDA graph captured (train/micro_step_graphs.h).
  EXPECT_EQ(after->A_split.data_ptr(), before->A_split.data_ptr());
}

}  // namespace
}  // namespace finetune
