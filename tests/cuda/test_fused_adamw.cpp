// Fused AdamW (AdamW with fused: ATen's multi-tensor _fused_adamw_, one launch for every
// parameter) against the per-tensor path (AdamW without it: torch.optim's _single_tensor_adamw op
// for op) on the same GPU, fp32 parameters as LoRA trains them, ten steps with weight decay and
// bias correction, and both against the per-tensor formula in fp64 on the CPU.
//
// Not equal: the two round differently. The per-tensor path rounds every op to fp32 (the decay
// factor 1 - lr * wd as a float, lerp, mul + addcmul, sqrt, div, add, addcdiv); the fused kernel
// keeps the moment updates and the decay in double where ATen's scalars are double, and computes
// the bias corrections in its own order. Bounds after k steps, per element, with e = 2^-23 (fp32's
// epsilon), for each path against fp64 and for the two against each other:
//   parameter: each step rounds it at most three times on the per-tensor side (the decay factor,
//     the decayed value, the updated value: 1.5 e |p|) and twice on the fused side (e |p|), 2.5 e |p|
//     between the two; the update lr / bc1 * m / (sqrt(v / bc2) + eps) carries the moments'
//     accumulated rounding (<= 0.8 e t max|g| per side, over bc1 >= 0.1 and sqrt(v^) >=
//     max|g| / sqrt(t)) and its own half-dozen roundings, about 30 e lr at t = 10. Errors add over
//     steps: k e (3 |p| + 100 lr), |p| the larger of the initial and final magnitudes plus k lr
//     (how far a parameter can move).
//   moments: lerp rounds m three times (<= 0.8 e max|g| a step), mul + addcmul v four times
//     (<= 1.5 e max g^2 a step; |m| <= max|g| and v <= max g^2, being averages of them):
//     k 2 e (|m| + max|g|) and k 2 e (v + max g^2).
// What the bounds rule out: the decay moves a parameter by lr * wd |p| = 1e-3 |p| per step and the
// bias correction scales the first updates by up to 3x; the parameter bound after ten steps is
// 3.6e-6 |p| + 1.6e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "finetune/train/adamw.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::host_double;
using cuda_testing::within_bound;

// Several tensors of one launch, with element counts not multiples of the kernel's vector width.
const std::vector<std::vector<int64_t>> kShapes = {{16, 600}, {1000, 8}, {12345}, {8, 16}, {63, 65}, {1}};
constexpr int kSteps = 10;

struct Problem {
  std::vector<at::Tensor> initial;              // fp32, CPU
  std::vector<std::vector<at::Tensor>> grads;   // [step][parameter], fp32, CPU
  std::vector<double> lrs;
  Problem() {
    at::manual_seed(15);
    for (const auto& shape : kShapes) initial.push_back(at::randn(shape));
    for (int step = 0; step < kSteps; ++step) {
      // |g| in [0.5, 1.5] x 10^-(step % 3), random signs: magnitudes that change between steps,
      // bounded away from zero (Adam divides by sqrt(v), so near-zero gradients are all noise).
      std::vector<at::Tensor> g;
      const double scale = std::pow(10.0, -(step % 3));
      for (const auto& shape : kShapes) g.push_back(at::sign(at::randn(shape)) * (at::rand(shape) + 0.5) * scale);
      grads.push_back(g);
      lrs.push_back(1e-2 * (1.0 - 0.5 * step / kSteps));
    }
  }

  // The parameters after `steps` steps of AdamW(fused) on `device` in `dtype`; its state too.
  std::pair<std::vector<at::Tensor>, OptimizerState> run(const at::Device& device, at::ScalarType dtype, bool fused,
                                                         const AdamWOptions& options) const {
    std::vector<at::Tensor> parameters;
    for (const auto& t : initial) parameters.push_back(t.to(device, dtype).clone().set_requires_grad(true));
    AdamW optimizer(parameters, options, fused);
    for (int step = 0; step < kSteps; ++step) {
      for (size_t i = 0; i < parameters.size(); ++i) parameters[i].mutable_grad() = grads[step][i].to(device, dtype);
      optimizer.step(lrs[step]);
    }
    return {parameters, optimizer.state()};
  }
};

double max_abs(const std::vector<at::Tensor>& tensors) {
  double out = 0;
  for (const auto& t : tensors) out = std::max(out, t.abs().max().item<double>());
  return out;
}

TEST(FusedAdamW, TenStepsWithinTheRoundingBoundOfThePerTensorPathAndOfFp64) {
  const Problem problem;
  AdamWOptions options;
  options.weight_decay = 0.1;
  const at::Device cuda(at::kCUDA, 0);
  const auto [fused, fused_state] = problem.run(cuda, at::kFloat, /*fused=*/true, options);
  const auto [aten, aten_state] = problem.run(cuda, at::kFloat, /*fused=*/false, options);
  const auto [exact, exact_state] = problem.run(at::kCPU, at::kDouble, /*fused=*/false, options);

  const double e = std::ldexp(1.0, -23);
  const double max_lr = *std::max_element(problem.lrs.begin(), problem.lrs.end());
  std::vector<at::Tensor> all_grads;
  for (const auto& step : problem.grads) all_grads.insert(all_grads.end(), step.begin(), step.end());
  const double max_grad = max_abs(all_grads);
  for (size_t i = 0; i < kShapes.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i) + " " + cuda_testing::shape_text(kShapes[i]));
    const auto p_exact = host_double(exact[i]);
    const auto p_initial = host_double(problem.initial[i]);
    const auto p_magnitude = at::maximum(p_exact.abs(), p_initial.abs()) + kSteps * max_lr;
    const auto p_bound = kSteps * e * (3 * p_magnitude + 100 * max_lr);
    EXPECT_TRUE(within_bound(fused[i], aten[i], p_bound)) << "fused vs per-tensor";
    EXPECT_TRUE(within_bound(fused[i], p_exact, p_bound)) << "fused vs fp64";
    EXPECT_TRUE(within_bound(aten[i], p_exact, p_bound)) << "per-tensor vs fp64";
    // The steps moved the parameters by far more than the bound: the check has teeth.
    EXPECT_GT((p_exact - p_initial).abs().mean().item<double>(), 100 * p_bound.mean().item<double>());

    // The moments (state fields exp_avg, exp_avg_sq), each path against fp64.
    for (size_t field = 0; field < 2; ++field) {
      const auto& name = fused_state.parameters[i][field].first;
      const auto moment_exact = host_double(exact_state.parameters[i][field].second);
      const double scale = field == 0 ? max_grad : max_grad * max_grad;
      const auto m_bound = kSteps * 2 * e * (moment_exact.abs() + scale);
      EXPECT_TRUE(within_bound(fused_state.parameters[i][field].second, moment_exact, m_bound)) << "fused " << name;
      EXPECT_TRUE(within_bound(aten_state.parameters[i][field].second, moment_exact, m_bound)) << "per-tensor " << name;
    }
  }
  EXPECT_EQ(fused_state.steps, kSteps);
}

}  // namespace
}  // namespace finetune
