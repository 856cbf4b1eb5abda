// fp16 dynamic loss scaling against torch.amp.GradScaler("cpu") driven as HF Trainer drives it
// (unscale_, step, update per optimizer step), fixtures from make_loss_scaler_fixtures.py: steps
// with inf / -inf / NaN / scaled-into-overflow gradients and a short growth interval. The scale
// each step uses, the unscaled gradients, the skipped steps and the scale and growth tracker
// after every update must be GradScaler's bit for bit: the ops are the same ATen kernels.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "../reference/tensor_fixtures.h"
#include "finetune/train/loss_scaler.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using reference::same_bits;
using reference::TensorFixture;

nlohmann::json fixture() { return reference::load_json_fixture("loss_scaler", "loss_scaler.json"); }

LossScalerConfig config_of(const nlohmann::json& c) {
  return {c.at("init_scale").get<double>(), c.at("growth_factor").get<double>(), c.at("backoff_factor").get<double>(),
          c.at("growth_interval").get<int64_t>()};
}

// Runs steps [first, end) of case `c` through `scaler`, checking every step against GradScaler.
// Returns the number of skipped steps.
int run_steps(LossScaler& scaler, const nlohmann::json& c, size_t first) {
  const std::string name = c.at("name");
  const TensorFixture tensors(reference::fixture_path("loss_scaler", name + ".safetensors"));
  const int64_t count = c.at("parameter_count");
  const auto& steps = c.at("steps");
  int skipped = 0;
  for (size_t s = first; s < steps.size(); ++s) {
    const std::string step = std::to_string(s);
    SCOPED_TRACE(name + " step " + step);
    EXPECT_TRUE(same_bits(scaler.scale(), tensors["scale." + step]));
    std::vector<at::Tensor> grads;
    for (int64_t i = 0; i < count; ++i) grads.push_back(tensors["scaled." + step + "." + std::to_string(i)].clone());
    grads.insert(grads.begin() + 2, at::Tensor());  // a parameter without a gradient
    scaler.unscale(grads);
    grads.erase(grads.begin() + 2);
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_TRUE(same_bits(grads[i], tensors["unscaled." + step + "." + std::to_string(i)])) << "gradient " << i;
    }
    const bool expected_skip = steps[s].at("skipped");
    EXPECT_EQ(expected_skip, tensors["found_inf." + step].item<float>() != 0.0f);
    EXPECT_EQ(scaler.step_was_skipped(), expected_skip);
    EXPECT_EQ(scaler.step_was_skipped(), expected_skip);  // asking again reads the same flag
    skipped += expected_skip;
    scaler.update();
    EXPECT_TRUE(same_bits(scaler.scale(), tensors["scale_after." + step]));
    const auto state = scaler.state();
    EXPECT_EQ(state.scale, steps[s].at("state_dict").at("scale").get<double>());
    EXPECT_EQ(state.growth_tracker, steps[s].at("state_dict").at("_growth_tracker").get<int64_t>());
    EXPECT_EQ(state.growth_tracker, tensors["growth_tracker_after." + step].item<int32_t>());
  }
  return skipped;
}

TEST(LossScaler, DefaultsAreGradScalers) {
  const auto defaults = fixture().at("defaults");
  const LossScalerConfig config;
  EXPECT_EQ(config.init_scale, defaults.at("init_scale").get<double>());
  EXPECT_EQ(config.growth_factor, defaults.at("growth_factor").get<double>());
  EXPECT_EQ(config.backoff_factor, defaults.at("backoff_factor").get<double>());
  EXPECT_EQ(config.growth_interval, defaults.at("growth_interval").get<int64_t>());
}

TEST(LossScaler, MatchesGradScalerStepByStep) {
  const auto cases = fixture().at("cases");
  ASSERT_EQ(cases.size(), 3u);
  int skipped = 0, grown = 0, backed_off = 0;
  for (const auto& c : cases) {
    LossScaler scaler(config_of(c), at::kCPU);
    skipped += run_steps(scaler, c, 0);
    double previous = c.at("init_scale");
    for (const auto& step : c.at("steps")) {
      const double scale = step.at("state_dict").at("scale");
      grown += scale > previous;
      backed_off += scale < previous;
      previous = scale;
    }
  }
  // The fixtures exercise what they are for: skipped steps, growth and backoff.
  EXPECT_GE(skipped, 6);
  EXPECT_GE(grown, 4);
  EXPECT_EQ(backed_off, skipped);
}

TEST(LossScaler, GrowthToInfinityKeepsTheScale) {
  const auto cases = fixture().at("cases");
  const auto& c = cases.at(2);
  ASSERT_EQ(c.at("name"), "growth_saturates");
  for (const auto& step : c.at("steps")) {
    EXPECT_FALSE(step.at("skipped").get<bool>());
    EXPECT_EQ(step.at("state_dict").at("scale").get<double>(), c.at("init_scale").get<double>());
  }
}

// A checkpoint's state continues exactly where GradScaler.load_state_dict would.
TEST(LossScaler, ContinuesFromASavedState) {
  const auto c = fixture().at("cases").at(0);
  const auto& steps = c.at("steps");
  for (size_t k : {size_t{0}, size_t{2}, size_t{5}, size_t{9}}) {
    SCOPED_TRACE("resumed after step " + std::to_string(k));
    auto config = config_of(c);
    config.init_scale = 1.0;  // overwritten by the state
    LossScaler scaler(config, at::kCPU);
    const auto& saved = steps.at(k).at("state_dict");
    scaler.load_state({saved.at("scale").get<double>(), saved.at("_growth_tracker").get<int64_t>()});
    run_steps(scaler, c, k + 1);
  }
}

// The trainer's (possibly CUDA-graph-captured) backward reads scale() by address.
TEST(LossScaler, ScaleIsOneTensorChangedInPlace) {
  LossScaler scaler({}, at::kCPU);
  const void* address = scaler.scale().data_ptr();
  EXPECT_EQ(scaler.scale().scalar_type(), at::kFloat);
  EXPECT_EQ(scaler.scale().numel(), 1);
  EXPECT_EQ(scaler.scale().item<float>(), 65536.0f);
  std::vector<at::Tensor> grads{at::full({3}, std::numeric_limits<float>::infinity())};
  scaler.unscale(grads);
  scaler.update();
  EXPECT_EQ(scaler.scale().item<float>(), 32768.0f);
  scaler.load_state({1024.0, 7});
  EXPECT_EQ(scaler.scale().item<float>(), 1024.0f);
  EXPECT_EQ(scaler.state().growth_tracker, 7);
  EXPECT_EQ(scaler.scale().data_ptr(), address);
}

TEST(LossScaler, RefusesMisuse) {
  EXPECT_THROW(LossScaler({65536.0, 1.0, 0.5, 2000}, at::kCPU), Error);  // GradScaler: growth > 1
  EXPECT_THROW(LossScaler({65536.0, 2.0, 1.0, 2000}, at::kCPU), Error);  // backoff < 1
  EXPECT_THROW(LossScaler({0.0, 2.0, 0.5, 2000}, at::kCPU), Error);
  EXPECT_THROW(LossScaler({65536.0, 2.0, 0.5, 0}, at::kCPU), Error);
  LossScaler scaler({}, at::kCPU);
  EXPECT_THROW(scaler.update(), Error);  // no unscale() this step
  EXPECT_THROW(scaler.step_was_skipped(), Error);
  EXPECT_THROW(scaler.unscale({at::ones({2}, at::kHalf)}), Error);  // GradScaler refuses fp16 gradients
  std::vector<at::Tensor> grads{at::ones({2})};
  scaler.unscale(grads);
  EXPECT_THROW(scaler.unscale(grads), Error);  // the gradients would be divided twice
  EXPECT_FALSE(scaler.step_was_skipped());
  scaler.update();
  EXPECT_THROW(scaler.load_state({std::numeric_limits<double>::infinity(), 0}), Error);
  EXPECT_THROW(scaler.load_state({0.0, 0}), Error);
  EXPECT_THROW(scaler.load_state({8.0, -1}), Error);
}

}  // namespace
}  // namespace finetune
