// The gathered expert dispatch and combine on the GPU (Note [Gathered expert dispatch] in
// model/expert_dispatch.h), both the fused CUDA kernels (model/cuda/expert_dispatch_kernels.cu)
// and the ATen gathers, against the index_select / weighted index_add composition they replace
// (whose CUDA index_add adds with atomics) and against the exact sums in fp64 of the same inputs.
//
// bf16 and fp16, weights in the rows' dtype (Qwen3-MoE) and fp32 (Mixtral):
//   - the combine's output gradient, one product rounded once, equals the composition's;
//   - every sum (the combine over k, the weights' gradient over C, the dispatch's gradient over k)
//     accumulates in fp32 and rounds once, so it lies within one unit in the last place of the
//     exact sum, plus the fp32 accumulation's error (2^-20 of the summed magnitudes for the k
//     terms, 2^-16 for the up to 4,096 terms of a dot product);
//   - and, over all shapes of a dtype, no further from the exact sums (relative L2) than the
//     composition's.
// fp32 (ATen gathers only): within 1e-6 relative L2 of the composition, forward and gradients.
//
// Shapes: Qwen3-30B-A3B's (128 experts, top-8, hidden 2048) and Mixtral's (8, top-2, 4096) on a few
// hundred tokens; top-1 with an odd width (the element-wise kernels); rows two bytes into their
// storage (element-wise); more experts than assignments (experts no row reaches).
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>

#include "finetune/model/expert_dispatch.h"
#include "finetune/util/errors.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::ErrorTally;
using cuda_testing::host_double;

const at::Device kCuda(at::kCUDA, 0);

struct DispatchCase {
  int64_t tokens;
  int64_t top_k;
  int64_t experts;
  int64_t width;
  int64_t storage_offset;  // of the expert outputs and x
};

const std::vector<DispatchCase> kCases = {
    {512, 8, 128, 2048, 0},  // Qwen3-30B-A3B
    {256, 2, 8, 4096, 0},    // Mixtral-8x7B
    {37, 1, 4, 13, 0},       // top-1, odd width: element-wise
    {64, 2, 16, 24, 1},      // misaligned: element-wise
    {5, 2, 16, 16, 0},       // 10 assignments, 16 experts
};

std::string describe(const DispatchCase& c) {
  return "N " + std::to_string(c.tokens) + " k " + std::to_string(c.top_k) + " E " + std::to_string(c.experts) +
         " C " + std::to_string(c.width) + " offset " + std::to_string(c.storage_offset);
}

ExpertDispatch random_dispatch(const DispatchCase& c) {
  const auto scores = at::rand({c.tokens, c.experts}, at::TensorOptions().device(kCuda));
  return plan_expert_dispatch(std::get<1>(at::topk(scores, c.top_k, -1)));  // k distinct experts per token
}

// The composition experts_forward ran before: out = zeros.index_add(tokens, outputs * sorted weights).
at::Tensor composed_combine(const at::Tensor& outputs, const at::Tensor& weights, const ExpertDispatch& dispatch) {
  const auto sorted_weights = weights.reshape({-1}).index_select(0, dispatch.order).unsqueeze(1);  // (N*k, 1)
  const auto weighted = (outputs * sorted_weights).to(outputs.scalar_type());
  return at::zeros({dispatch.num_tokens(), outputs.size(1)}, outputs.options()).index_add(0, dispatch.tokens, weighted);
}

ExpertDispatch on_host(const ExpertDispatch& dispatch) {
  return {dispatch.top_k, dispatch.order.cpu(), dispatch.tokens.cpu(), dispatch.inverse.cpu()};
}

at::Tensor leaf(const at::Tensor& values, int64_t storage_offset) {
  return cuda_testing::copy_at_offset(values.detach(), storage_offset).detach().requires_grad_(true);
}

// |got - exact| <= one ulp of `dtype` at |exact| + accumulation * terms (terms: the summed magnitudes).
::testing::AssertionResult within_a_rounding(const at::Tensor& got, const at::Tensor& exact, const at::Tensor& terms,
                                             at::ScalarType dtype, double accumulation) {
  const auto bound = cuda_testing::ulp_at(exact.abs(), dtype) + terms * accumulation;
  return cuda_testing::within_bound(got, exact, bound);
}

struct Tallies {
  ErrorTally forward, weights_grad, x_grad;
};

// One shape, dtype, weights' dtype and kernel choice: the checks of the file's comment.
void check_half_case(const DispatchCase& c, at::ScalarType dtype, at::ScalarType weights_dtype, bool fused,
                     Tallies& tallies) {
  const auto options = at::TensorOptions().device(kCuda);
  const auto dispatch = random_dispatch(c);
  const auto host = on_host(dispatch);
  const auto outputs = at::randn({c.tokens * c.top_k, c.width}, options).to(dtype);
  const auto weights = at::softmax(at::randn({c.tokens, c.top_k}, options), -1).to(weights_dtype);
  const auto upstream = at::randn({c.tokens, c.width}, options).to(dtype);
  auto outputs_new = leaf(outputs, c.storage_offset), weights_new = leaf(weights, 0);
  auto outputs_old = leaf(outputs, 0), weights_old = leaf(weights, 0);
  const auto got = combine_rows(outputs_new, weights_new, dispatch, fused);
  const auto old = composed_combine(outputs_old, weights_old, dispatch);
  ASSERT_EQ(got.scalar_type(), dtype);
  const auto got_grads = torch::autograd::grad({got}, {outputs_new, weights_new}, {upstream});
  const auto old_grads = torch::autograd::grad({old}, {outputs_old, weights_old}, {upstream});

  const auto outputs64 = host_double(outputs), weights64 = host_double(weights), upstream64 = host_double(upstream);
  const auto exact = composed_combine(outputs64, weights64, host);
  EXPECT_TRUE(within_a_rounding(got, exact, composed_combine(outputs64.abs(), weights64.abs(), host), dtype,
                                std::ldexp(1.0, -20)))
      << "forward";
  tallies.forward.add(got, old, exact);

  EXPECT_TRUE(cuda_testing::equal_values(got_grads[0], old_grads[0])) << "outputs' gradient";
  const auto gathered = outputs64.index_select(0, host.inverse).view({c.tokens, c.top_k, c.width});
  const auto exact_weights_grad = (gathered * upstream64.unsqueeze(1)).sum(-1);  // (N, k)
  const auto weights_grad_terms = (gathered.abs() * upstream64.abs().unsqueeze(1)).sum(-1);
  EXPECT_EQ(got_grads[1].scalar_type(), weights_dtype);
  EXPECT_TRUE(within_a_rounding(got_grads[1], exact_weights_grad, weights_grad_terms, weights_dtype,
                                std::ldexp(1.0, -16)))
      << "weights' gradient";
  tallies.weights_grad.add(got_grads[1], old_grads[1], exact_weights_grad);

  const auto x = at::randn({c.tokens, c.width}, options).to(dtype);
  const auto rows_upstream = at::randn({c.tokens * c.top_k, c.width}, options).to(dtype);
  auto x_new = leaf(x, c.storage_offset), x_old = leaf(x, 0);
  const auto rows = dispatch_rows(x_new, dispatch, fused);
  EXPECT_TRUE(cuda_testing::equal_values(rows, x.index_select(0, dispatch.tokens))) << "dispatched rows";
  const auto x_grad = torch::autograd::grad({rows}, {x_new}, {rows_upstream})[0];
  const auto x_grad_old = torch::autograd::grad({x_old.index_select(0, dispatch.tokens)}, {x_old}, {rows_upstream})[0];
  const auto rows_upstream64 = host_double(rows_upstream);
  const auto exact_x_grad = at::zeros({c.tokens, c.width}, at::kDouble).index_add(0, host.tokens, rows_upstream64);
  const auto x_grad_terms = at::zeros({c.tokens, c.width}, at::kDouble).index_add(0, host.tokens, rows_upstream64.abs());
  EXPECT_TRUE(within_a_rounding(x_grad, exact_x_grad, x_grad_terms, dtype, std::ldexp(1.0, -20))) << "x's gradient";
  tallies.x_grad.add(x_grad, x_grad_old, exact_x_grad);
}

TEST(ExpertDispatchCuda, HalfSumsRoundOnceAndOutputGradientEqualsTheComposition) {
  at::manual_seed(21);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    for (const bool fused : {true, false}) {
      Tallies tallies;
      for (const auto weights_dtype : {dtype, at::kFloat}) {
        for (const auto& c : kCases) {
          SCOPED_TRACE(describe(c) + " " + c10::toString(dtype) + " weights " + c10::toString(weights_dtype) +
                       (fused ? " fused" : " ATen"));
          check_half_case(c, dtype, weights_dtype, fused, tallies);
        }
      }
      const std::string label = std::string(c10::toString(dtype)) + (fused ? " fused" : " ATen");
      EXPECT_TRUE(tallies.forward.fused_no_worse(1.0)) << label << " forward";
      EXPECT_TRUE(tallies.weights_grad.fused_no_worse(1.0)) << label << " weights' gradient";
      EXPECT_TRUE(tallies.x_grad.fused_no_worse(1.0)) << label << " x's gradient";
    }
  }
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const auto difference = (host_double(got) - host_double(want)).norm().item<double>();
  return difference / host_double(want).norm().item<double>();
}

TEST(ExpertDispatchCuda, Fp32EqualsTheComposition) {
  at::manual_seed(22);
  const auto options = at::TensorOptions().device(kCuda);
  for (const auto& c : kCases) {
    SCOPED_TRACE(describe(c));
    const auto dispatch = random_dispatch(c);
    const auto outputs = at::randn({c.tokens * c.top_k, c.width}, options);
    const auto weights = at::softmax(at::randn({c.tokens, c.top_k}, options), -1);
    const auto upstream = at::randn({c.tokens, c.width}, options);
    auto outputs_new = leaf(outputs, c.storage_offset), weights_new = leaf(weights, 0);
    auto outputs_old = leaf(outputs, 0), weights_old = leaf(weights, 0);
    const auto got = combine_rows(outputs_new, weights_new, dispatch, /*fused=*/false);
    const auto old = composed_combine(outputs_old, weights_old, dispatch);
    EXPECT_LE(relative_error(got, old), 1e-6) << "forward";
    const auto got_grads = torch::autograd::grad({got}, {outputs_new, weights_new}, {upstream});
    const auto old_grads = torch::autograd::grad({old}, {outputs_old, weights_old}, {upstream});
    EXPECT_LE(relative_error(got_grads[0], old_grads[0]), 1e-6) << "outputs' gradient";
    EXPECT_LE(relative_error(got_grads[1], old_grads[1]), 1e-6) << "weights' gradient";

    auto x_new = leaf(at::randn({c.tokens, c.width}, options), c.storage_offset);
    auto x_old = leaf(x_new, 0);
    const auto rows_upstream = at::randn({c.tokens * c.top_k, c.width}, options);
    const auto x_grad = torch::autograd::grad({dispatch_rows(x_new, dispatch, false)}, {x_new}, {rows_upstream})[0];
    const auto x_grad_old =
        torch::autograd::grad({x_old.index_select(0, dispatch.tokens)}, {x_old}, {rows_upstream})[0];
    EXPECT_LE(relative_error(x_grad, x_grad_old), 1e-6) << "x's gradient";
  }
}

TEST(ExpertDispatchCuda, FusedKernelsRefuseFp32) {
  const auto dispatch = plan_expert_dispatch(at::zeros({2, 1}, at::TensorOptions().dtype(at::kLong).device(kCuda)));
  const auto outputs = at::zeros({2, 8}, at::TensorOptions().device(kCuda));
  EXPECT_THROW(combine_rows(outputs, at::ones({2, 1}, outputs.options()), dispatch, /*fused=*/true), Error);
}

}  // namespace
}  // namespace finetune
