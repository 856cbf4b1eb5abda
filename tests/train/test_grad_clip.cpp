// Gradient clipping against torch.nn.utils.clip_grad_norm_ on fixed gradients: the returned
// pre-clip norm and every clipped gradient, bit for bit. Exact because the ops are torch's:
// _foreach_norm, vector_norm of the stacked norms, `max_norm / (total + 1e-6)` (which Python runs
// as reciprocal() * max_norm), clamp to 1, _foreach_mul_. max_norm <= 0 disables clipping (as in
// HF Trainer and options.h) but still returns the norm. Fixtures: make_train_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../reference/tensor_fixtures.h"
#include "finetune/train/grad_clip.h"

namespace finetune {
namespace {

using reference::max_abs_difference;
using reference::same_bits;
using reference::TensorFixture;

struct ClipCase {
  std::string name;
  double max_norm;
  bool changed;  // whether torch's gradients differ from the inputs
};

std::vector<ClipCase> clip_cases(bool enabled) {
  std::vector<ClipCase> cases;
  const auto fixture = reference::load_json_fixture("train", "grad_clip.json");
  for (const auto& c : fixture.at("cases")) {
    ClipCase clip{c.at("name"), c.at("max_norm"), c.at("changed")};
    if ((clip.max_norm > 0) == enabled) cases.push_back(clip);
  }
  return cases;
}

// Parameters holding the fixture's gradients, plus one without a gradient (left out, as torch does).
std::vector<at::Tensor> parameters_with_gradients(const TensorFixture& tensors, int64_t count) {
  std::vector<at::Tensor> parameters;
  for (int64_t i = 0; i < count; ++i) {
    const auto& grad = tensors["grad." + std::to_string(i)];
    auto p = at::zeros_like(grad).set_requires_grad(true);
    p.mutable_grad() = grad.clone();
    parameters.push_back(p);
  }
  parameters.push_back(at::zeros({3}).set_requires_grad(true));
  return parameters;
}

// Clips with each case's max_norm; checks the norm and every gradient; returns the worst error.
double check_cases(const std::vector<ClipCase>& cases) {
  const int64_t count = reference::load_json_fixture("train", "grad_clip.json").at("parameter_count");
  EXPECT_GE(count, 3);
  const TensorFixture tensors("train", "grad_clip.safetensors");
  double worst = 0.0;
  for (const auto& c : cases) {
    SCOPED_TRACE("case " + c.name + " max_norm " + std::to_string(c.max_norm));
    auto parameters = parameters_with_gradients(tensors, count);
    const at::Tensor norm = clip_grad_norm(parameters, c.max_norm);
    EXPECT_TRUE(same_bits(norm, tensors["norm." + c.name])) << "returned norm " << norm.item<double>();
    worst = std::max(worst, max_abs_difference(norm, tensors["norm." + c.name]));
    bool changed = false;
    for (size_t i = 0; i + 1 < parameters.size(); ++i) {
      const auto& expected = tensors["clipped." + c.name + "." + std::to_string(i)];
      EXPECT_TRUE(same_bits(parameters[i].grad(), expected)) << "gradient " << i;
      worst = std::max(worst, max_abs_difference(parameters[i].grad(), expected));
      changed |= !at::equal(parameters[i].grad(), tensors["grad." + std::to_string(i)]);
    }
    EXPECT_EQ(changed, c.changed);
    EXPECT_FALSE(parameters.back().grad().defined());
  }
  return worst;
}

TEST(GradClip, ClipsLikeTorchClipGradNorm) {
  const auto cases = clip_cases(/*enabled=*/true);
  ASSERT_GE(cases.size(), 3u);
  EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [](const ClipCase& c) { return c.changed; }));
  EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [](const ClipCase& c) { return !c.changed; }));
  RecordProperty("max_abs_error", std::to_string(check_cases(cases)));
}

TEST(GradClip, NonPositiveMaxNormOnlyMeasures) {
  const auto cases = clip_cases(/*enabled=*/false);
  ASSERT_EQ(cases.size(), 2u);  // 0 and a negative max_norm; the gradients must stay as they were
  for (const auto& c : cases) EXPECT_FALSE(c.changed) << c.name;
  RecordProperty("max_abs_error", std::to_string(check_cases(cases)));
}

TEST(GradClip, NoGradientsGiveZeroNorm) {
  std::vector<at::Tensor> parameters{at::ones({4}).set_requires_grad(true)};
  EXPECT_EQ(clip_grad_norm(parameters, 1.0).item<double>(), 0.0);
}

}  // namespace
}  // namespace finetune
