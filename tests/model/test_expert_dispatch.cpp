// The gathered dispatch and combine (Note [Gathered expert dispatch] in model/expert_dispatch.h)
// against the index_select / weighted index_add composition they replace (and transformers'
// loop computes): the permutation and its inverse; forward and the gradients of x, the expert
// outputs and the routing weights, in fp64 and fp32, for top-1, top-2 and top-8 with experts no
// token reaches, the weights in the rows' dtype (Qwen3-MoE) or fp32 (Mixtral); and in bf16 the
// combine's output gradient equal to the composition's (one product, rounded once) while the sums
// (fp32 accumulation, rounded once) lie within a rounding of the exact fp64 sums and no further
// from them than the composition's bf16 sums.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>

#include "finetune/model/expert_dispatch.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

struct DispatchCase {
  int64_t tokens;
  int64_t top_k;
  int64_t experts;
  int64_t width;
};

// Tokens x top-k below the expert count in the first, second and last: some experts get no row.
const std::vector<DispatchCase> kCases = {{5, 1, 8, 8}, {7, 2, 16, 16}, {16, 8, 12, 24}, {3, 2, 8, 5}};

std::string describe(const DispatchCase& c) {
  return "N " + std::to_string(c.tokens) + " k " + std::to_string(c.top_k) + " E " + std::to_string(c.experts) +
         " C " + std::to_string(c.width);
}

// k distinct experts per token (top-k of random scores), as the router picks them.
at::Tensor random_experts(const DispatchCase& c) {
  return std::get<1>(at::topk(at::rand({c.tokens, c.experts}), c.top_k, -1));  // (N, k) int64
}

// The composition experts_forward ran before (and transformers' index_add_): rows by index_select,
// out = zeros.index_add(tokens, (outputs * sorted weights) in outputs' dtype).
at::Tensor composed_dispatch(const at::Tensor& x, const ExpertDispatch& dispatch) {
  return x.index_select(0, dispatch.tokens);
}

at::Tensor composed_combine(const at::Tensor& outputs, const at::Tensor& weights, const ExpertDispatch& dispatch) {
  const auto sorted_weights = weights.reshape({-1}).index_select(0, dispatch.order).unsqueeze(1);  // (N*k, 1)
  const auto weighted = (outputs * sorted_weights).to(outputs.scalar_type());
  return at::zeros({dispatch.num_tokens(), outputs.size(1)}, outputs.options()).index_add(0, dispatch.tokens, weighted);
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const auto difference = (got.to(at::kDouble) - want.to(at::kDouble)).norm().item<double>();
  const auto scale = want.to(at::kDouble).norm().item<double>();
  return scale == 0 ? difference : difference / scale;
}

double tolerance(at::ScalarType dtype) { return dtype == at::kDouble ? 1e-12 : 1e-6; }

at::Tensor leaf(const at::Tensor& values) { return values.detach().clone().requires_grad_(true); }

TEST(ExpertDispatch, PlanSortsAssignmentsByExpertAndInvertsThePermutation) {
  at::manual_seed(0);
  for (const auto& c : kCases) {
    SCOPED_TRACE(describe(c));
    const auto experts = random_experts(c);
    const auto dispatch = plan_expert_dispatch(experts);
    const auto flat = experts.reshape({-1});
    const auto sorted = flat.index_select(0, dispatch.order);
    EXPECT_TRUE(at::equal(sorted, std::get<0>(at::sort(flat))));  // expert order
    EXPECT_TRUE(at::equal(dispatch.tokens, at::div(dispatch.order, c.top_k, "floor")));
    EXPECT_TRUE(at::equal(dispatch.inverse.index_select(0, dispatch.order), at::arange(flat.numel())));
    EXPECT_EQ(dispatch.num_tokens(), c.tokens);
  }
}

TEST(ExpertDispatch, DispatchEqualsIndexSelectAndItsGradientTheIndexAdd) {
  at::manual_seed(1);
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    for (const auto& c : kCases) {
      SCOPED_TRACE(describe(c) + " " + c10::toString(dtype));
      const auto dispatch = plan_expert_dispatch(random_experts(c));
      const auto x = at::randn({c.tokens, c.width}, at::kDouble).to(dtype);
      const auto upstream = at::randn({c.tokens * c.top_k, c.width}, at::kDouble).to(dtype);
      auto x_gathered = leaf(x), x_composed = leaf(x);
      const auto rows = dispatch_rows(x_gathered, dispatch, /*fused=*/false);
      const auto want = composed_dispatch(x_composed, dispatch);
      EXPECT_TRUE(at::equal(rows, want));
      const auto got_grad = torch::autograd::grad({rows}, {x_gathered}, {upstream})[0];
      const auto want_grad = torch::autograd::grad({want}, {x_composed}, {upstream})[0];
      EXPECT_LE(relative_error(got_grad, want_grad), tolerance(dtype));
    }
  }
}

TEST(ExpertDispatch, CombineEqualsTheWeightedIndexAddForwardAndBackward) {
  at::manual_seed(2);
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    for (const auto weights_dtype : {dtype, at::kFloat}) {  // Qwen3-MoE: the model dtype; Mixtral: fp32
      for (const auto& c : kCases) {
        SCOPED_TRACE(describe(c) + " " + c10::toString(dtype) + " weights " + c10::toString(weights_dtype));
        const auto dispatch = plan_expert_dispatch(random_experts(c));
        const auto outputs = at::randn({c.tokens * c.top_k, c.width}, at::kDouble).to(dtype);
        const auto weights = at::softmax(at::randn({c.tokens, c.top_k}, at::kDouble), -1).to(weights_dtype);
        const auto upstream = at::randn({c.tokens, c.width}, at::kDouble).to(dtype);
        auto outputs_gathered = leaf(outputs), weights_gathered = leaf(weights);
        auto outputs_composed = leaf(outputs), weights_composed = leaf(weights);
        const auto got = combine_rows(outputs_gathered, weights_gathered, dispatch, /*fused=*/false);
        const auto want = composed_combine(outputs_composed, weights_composed, dispatch);
        ASSERT_EQ(got.scalar_type(), dtype);
        EXPECT_LE(relative_error(got, want), tolerance(dtype));
        const auto got_grads = torch::autograd::grad({got}, {outputs_gathered, weights_gathered}, {upstream});
        const auto want_grads = torch::autograd::grad({want}, {outputs_composed, weights_composed}, {upstream});
        EXPECT_LE(relative_error(got_grads[0], want_grads[0]), tolerance(dtype)) << "outputs' gradient";
        EXPECT_EQ(got_grads[1].scalar_type(), weights_dtype);
        EXPECT_LE(relative_error(got_grads[1], want_grads[1]), tolerance(weights_dtype)) << "weights' gradient";
      }
    }
  }
}

// |got - exact| within a rounding to bf16 of the exact value (one unit in the last place, so a
// tie or an fp32 accumulation error next to a rounding boundary still passes) plus the fp32
// accumulation's own error over `terms` (the sum of the magnitudes of what was added).
void expect_within_a_rounding(const at::Tensor& got, const at::Tensor& exact, const at::Tensor& terms) {
  const auto magnitude = exact.abs();
  const auto ulp = at::exp2(at::floor(at::log2(magnitude))) * std::ldexp(1.0, -7);  // bf16 spacing at |exact|
  const auto bound = ulp + terms * std::ldexp(1.0, -20);
  const auto excess = (got.to(at::kDouble) - exact).abs() - bound;
  EXPECT_EQ(excess.gt(0).sum().item<int64_t>(), 0) << "largest excess " << excess.max().item<double>();
}

TEST(ExpertDispatch, Bf16SumsRoundOnceFromFp32AndOutputGradientEqualsTheComposition) {
  at::manual_seed(3);
  for (const auto weights_dtype : {at::kBFloat16, at::kFloat}) {
    for (const auto& c : kCases) {
      SCOPED_TRACE(describe(c) + " weights " + c10::toString(weights_dtype));
      const auto dispatch = plan_expert_dispatch(random_experts(c));
      const auto outputs = at::randn({c.tokens * c.top_k, c.width}).to(at::kBFloat16);
      const auto weights = at::softmax(at::randn({c.tokens, c.top_k}), -1).to(weights_dtype);
      const auto upstream = at::randn({c.tokens, c.width}).to(at::kBFloat16);
      auto outputs_gathered = leaf(outputs), weights_gathered = leaf(weights);
      auto outputs_composed = leaf(outputs), weights_composed = leaf(weights);
      const auto got = combine_rows(outputs_gathered, weights_gathered, dispatch, /*fused=*/false);
      const auto composed = composed_combine(outputs_composed, weights_composed, dispatch);
      const auto got_grads = torch::autograd::grad({got}, {outputs_gathered, weights_gathered}, {upstream});
      const auto composed_grads = torch::autograd::grad({composed}, {outputs_composed, weights_composed}, {upstream});

      // Exact sums of the same bf16 values in fp64, and the magnitudes they add up.
      const auto outputs64 = outputs.to(at::kDouble), weights64 = weights.to(at::kDouble);
      const auto upstream64 = upstream.to(at::kDouble);
      const auto exact = composed_combine(outputs64, weights64, dispatch);
      expect_within_a_rounding(got, exact, composed_combine(outputs64.abs(), weights64.abs(), dispatch));
      EXPECT_LE(relative_error(got, exact), relative_error(composed, exact));

      EXPECT_TRUE(at::equal(got_grads[0], composed_grads[0])) << "outputs' gradient: one product, rounded once";
      const auto gathered = outputs64.index_select(0, dispatch.inverse).view({c.tokens, c.top_k, c.width});
      const auto exact_weights_grad = (gathered * upstream64.unsqueeze(1)).sum(-1);  // (N, k)
      const auto weights_grad_terms = (gathered.abs() * upstream64.abs().unsqueeze(1)).sum(-1);
      expect_within_a_rounding(got_grads[1], exact_weights_grad, weights_grad_terms);
      EXPECT_LE(relative_error(got_grads[1], exact_weights_grad),
                relative_error(composed_grads[1], exact_weights_grad) + 1e-12);
    }
  }
}

TEST(ExpertDispatch, Bf16DispatchGradientRoundsOnceFromFp32) {
  at::manual_seed(4);
  for (const auto& c : kCases) {
    SCOPED_TRACE(describe(c));
    const auto dispatch = plan_expert_dispatch(random_experts(c));
    const auto x = leaf(at::randn({c.tokens, c.width}).to(at::kBFloat16));
    const auto upstream = at::randn({c.tokens * c.top_k, c.width}).to(at::kBFloat16);
    const auto got = torch::autograd::grad({dispatch_rows(x, dispatch, /*fused=*/false)}, {x}, {upstream})[0];
    ASSERT_EQ(got.scalar_type(), at::kBFloat16);
    const auto upstream64 = upstream.to(at::kDouble);
    const auto exact = at::zeros({c.tokens, c.width}, at::kDouble).index_add(0, dispatch.tokens, upstream64);
    const auto terms = at::zeros({c.tokens, c.width}, at::kDouble).index_add(0, dispatch.tokens, upstream64.abs());
    expect_within_a_rounding(got, exact, terms);
  }
}

TEST(ExpertDispatch, RejectsMismatchedShapes) {
  const auto dispatch = plan_expert_dispatch(at::tensor({0, 1, 1, 0}, at::kLong).view({2, 2}));
  EXPECT_THROW(dispatch_rows(at::zeros({3, 4}), dispatch, false), Error);
  EXPECT_THROW(combine_rows(at::zeros({4, 4}), at::zeros({2, 1}), dispatch, false), Error);
  EXPECT_THROW(combine_rows(at::zeros({3, 4}), at::zeros({2, 2}), dispatch, false), Error);
  EXPECT_THROW(plan_expert_dispatch(at::zeros({4}, at::kLong)), Error);
}

}  // namespace
}  // namespace finetune
