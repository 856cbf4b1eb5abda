// The fused RMSNorm (ATen's _fused_rms_norm, rms_norm with fused_kernel) against transformers'
// composition that the unfused path runs (rms_norm without it: weight * (x.float() *
// rsqrt(mean(x.float()^2) + eps)).to(dtype), and its autograd), forward and backward, bf16 and fp16.
//
// Not equal: the fused kernel works in fp32 throughout and rounds once per output, where the
// composition also rounds intermediates to the dtype. Bounds per element, with u = eps / 2 the
// dtype's unit roundoff, x^ = x * r, r = rsqrt(mean(x^2) + eps), v = w * x^ (all exact), and 2x
// slack over the derivation for the fp32 differences (other reduction orders, rsqrt's last bits),
// which are 2^-24-sized against u = 2^-8 (bf16) or 2^-11 (fp16):
//   y:  the composition rounds x^ then w * round(x^): |y_aten - v| <= (2u + u^2)|v|; fused
//       |y_fused - v| <= u|v|; so |y_fused - y_aten| <= 3u|v| + ...   bound 2 eps |v|.
//   dx: autograd rounds the upstream product g * w (G) to the dtype, then works in fp32:
//       dx = r (G - x^ mean(G x^)); a relative u on each G moves dx_i by at most
//       u r (|G_i| + |x^_i| mean|G x^|); each side rounds its dx once more (u |dx| each).
//       bound eps r (|G| + |x^| mean|G x^|) + 2 eps |dx|.
//   dw: autograd rounds x^ and then each product g * round(x^) before the fp32 sum over rows
//       ((2u + u^2) |g x^| per term); each side rounds dw once (u |dw| each).
//       bound 2 eps (sum_rows |g x^| + |dw|).
//   Each bound also allows 2 subnormal spacings, for fp16 values below its normal range.
// And the fused results no further from the fp32 reference than the composition's (ratio 1):
// they skip roundings that the composition makes, so their L2 error is smaller (about 0.6-0.8 of
// it); summed over every shape of a dtype, several million elements (y, dx) and 8000 (dw).
#include <gtest/gtest.h>

#include "finetune/model/rms_norm.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::ErrorTally;
using cuda_testing::host_double;
using cuda_testing::within_bound;

struct RmsNormCase {
  std::vector<int64_t> shape;  // (..., D)
  double eps;
};

const std::vector<RmsNormCase> kCases = {
    {{1, 64}, 1e-6},          {{7, 2048}, 1e-5},   {{512, 4096}, 1e-6},    {{33, 1000}, 1e-5},
    {{5, 127}, 1e-6},         {{3, 9, 128}, 1e-6}, {{2, 5, 4, 128}, 1e-6},  // the q/k norm's (B, T, H, D)
    {{4, 3}, 1e-5},
};

TEST(FusedRmsNorm, WithinDerivedBoundsOfTheCompositionAndNoLessAccurate) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(13);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    const double eps = cuda_testing::dtype_epsilon(dtype);
    const double floor = 2 * cuda_testing::dtype_denorm_min(dtype);
    ErrorTally y_tally, dx_tally, dw_tally;
    for (const auto& c : kCases) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " x " + cuda_testing::shape_text(c.shape));
      const auto options = at::TensorOptions().device(cuda);
      const int64_t dim = c.shape.back();
      // Rows of magnitudes 1e-2 .. 10 (the small ones bring the variance near eps).
      auto row_shape = c.shape;
      row_shape.back() = 1;
      const auto row_scale = at::pow(10.0, at::rand(row_shape, options) * 3 - 2);
      const auto x = (at::randn(c.shape, options) * row_scale).to(dtype);
      const auto weight = (1 + 0.5 * at::randn({dim}, options)).to(dtype);
      const auto grad = at::randn(c.shape, options).to(dtype);

      auto x_aten = x.clone().requires_grad_(true);
      auto w_aten = weight.clone().requires_grad_(true);
      const auto y_aten = rms_norm(x_aten, w_aten, c.eps, /*fused_kernel=*/false);
      y_aten.backward(grad);

      auto x_fused = x.clone().requires_grad_(true);
      auto w_fused = weight.clone().requires_grad_(true);
      const auto y_fused = rms_norm(x_fused, w_fused, c.eps, /*fused_kernel=*/true);
      y_fused.backward(grad);
      ASSERT_EQ(y_fused.scalar_type(), dtype);
      ASSERT_TRUE(x_fused.grad().defined() && w_fused.grad().defined());

      // The exact quantities of the bounds, from the dtype's inputs in double: (rows, D).
      const auto X = host_double(x).view({-1, dim});
      const auto W = host_double(weight);
      const auto G = host_double(grad).view({-1, dim});
      const auto r = at::rsqrt(X.square().mean(-1, /*keepdim=*/true) + c.eps);
      const auto x_hat = X * r;
      const auto Gw = G * W;

      const auto y_bound = 2 * eps * (W * x_hat).abs() + floor;
      EXPECT_TRUE(within_bound(y_fused.view({-1, dim}), y_aten.view({-1, dim}), y_bound)) << "y";

      const auto dx_fused = host_double(x_fused.grad()).view({-1, dim});
      const auto dx_aten = host_double(x_aten.grad()).view({-1, dim});
      const auto dx_bound = eps * r * (Gw.abs() + x_hat.abs() * (Gw * x_hat).abs().mean(-1, true)) +
                            2 * eps * at::maximum(dx_fused.abs(), dx_aten.abs()) + floor;
      EXPECT_TRUE(within_bound(dx_fused, dx_aten, dx_bound)) << "dx";

      const auto dw_fused = host_double(w_fused.grad());
      const auto dw_aten = host_double(w_aten.grad());
      const auto dw_bound = 2 * eps * ((G * x_hat).abs().sum(0) + at::maximum(dw_fused.abs(), dw_aten.abs())) + floor;
      EXPECT_TRUE(within_bound(dw_fused, dw_aten, dw_bound)) << "dw";

      auto x_reference = x.to(at::kFloat).requires_grad_(true);
      auto w_reference = weight.to(at::kFloat).requires_grad_(true);
      const auto y_reference = rms_norm(x_reference, w_reference, c.eps, false);
      y_reference.backward(grad.to(at::kFloat));
      y_tally.add(y_fused, y_aten, y_reference);
      dx_tally.add(x_fused.grad(), x_aten.grad(), x_reference.grad());
      dw_tally.add(w_fused.grad(), w_aten.grad(), w_reference.grad());
    }
    EXPECT_TRUE(y_tally.fused_no_worse(1.0)) << c10::toString(dtype) << " y";
    EXPECT_TRUE(dx_tally.fused_no_worse(1.0)) << c10::toString(dtype) << " dx";
    EXPECT_TRUE(dw_tally.fused_no_worse(1.0)) << c10::toString(dtype) << " dw";
    RecordProperty(std::string(c10::toString(dtype)) + "_y_error_fused_vs_aten",
                   std::to_string(y_tally.fused_error()) + " / " + std::to_string(y_tally.aten_error()));
  }
}

}  // namespace
}  // namespace finetune
