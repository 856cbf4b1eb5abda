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
#include "finetune/train/adamw.h"

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
    AdamWOptions options;
    options.beta1 = c.at("beta1");
    options.beta2 = c.at("beta2");
    options.eps = c.at("eps");
    options.weight_decay = c.at("weight_decay");
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

}  // namespace
}  // namespace finetune
