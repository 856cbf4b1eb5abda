// The fused q/k RMSNorm + RoPE kernel (model/cuda/norm_rope_kernels.cu, fused_norm_rope) against the
// two kernels it replaces: ATen's fused RMSNorm (rms_norm with fused_kernel) and then the fused RoPE
// (apply_rope with fused_kernel), with the frozen weight of Qwen3's q_norm / k_norm, forward and
// backward, bf16 and fp16, head_dim 64, 128 and 256.
//
// The rounding points are the same: the normalised row is rounded once ((x r) w in fp32), then
// rotated with rope_kernel's two rounded products and rounded sum; the backward un-rotates g as
// rope_kernel's backward does (rounded), then computes RMSNorm's input gradient in fp32. The one
// difference is the order of the fp32 sum of squares (and of the backward's row sum), so r differs
// in its last bits (2^-24-sized against the dtype's u = eps / 2). Bounds per element, with N the
// exact normalised value w x r, P its partner in the rotation, C, S the tables, all in double:
//   y:  a flipped rounding of N moves it by one ulp (<= eps |N|), and each rounded product by that
//       times |C| or |S| plus its own flipped rounding; the sum's rounding flips too; (1 + 2 eps)
//       covers the rounded values' magnitudes over the exact ones:
//       bound 2 eps (1 + 2 eps) (|N C| + |P S|) + eps |y|.
//   dx: the same rounded upstream gradient G on both sides (the un-rotation's bits are equal);
//       r (G w - x^ mean(G w x^)) in fp32 in another order differs by a few 2^-24 of its terms'
//       magnitudes, then each side rounds once (a flip: eps |dx|):
//       bound eps |dx| + 2^-16 r (|G w| + |x^| mean|G w x^|).
//   Each bound allows 2 subnormal spacings. And the fused results as accurate against an fp32
//   reference as the two kernels' (the same roundings: a ratio within 1% over all shapes).
#include <gtest/gtest.h>

#include <cmath>

#include "finetune/model/fused_kernels.h"
#include "finetune/model/rms_norm.h"
#include "finetune/model/rope.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::ErrorTally;
using cuda_testing::host_double;
using cuda_testing::within_bound;

struct NormRopeCase {
  std::vector<int64_t> shape;  // (B, T, H, D)
  double eps;
};

const std::vector<NormRopeCase> kCases = {
    {{2, 7, 3, 64}, 1e-6},
    {{3, 33, 8, 128}, 1e-6},   // Qwen3's head_dim
    {{1, 512, 32, 128}, 1e-6},  // 2 M elements: most of the error tally
    {{2, 5, 4, 256}, 1e-5},
    {{1, 1, 1, 128}, 1e-6},    // one row: a partial block of warps
};

at::Tensor inverse_frequencies(int64_t head_dim, const at::Device& device) {
  const auto exponent = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kFloat).device(device)) /
                        static_cast<double>(head_dim);
  return at::pow(1000000.0, exponent).reciprocal();  // Qwen3's rope_theta
}

TEST(FusedNormRope, WithinDerivedBoundsOfRmsNormThenRopeAndAsAccurate) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(17);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    const double eps = cuda_testing::dtype_epsilon(dtype);
    const double floor = 2 * cuda_testing::dtype_denorm_min(dtype);
    ErrorTally y_tally, dx_tally;
    int64_t y_differing = 0, dx_differing = 0, elements = 0;
    for (const auto& c : kCases) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " x " + cuda_testing::shape_text(c.shape));
      const auto options = at::TensorOptions().device(cuda);
      const int64_t batch = c.shape[0], tokens = c.shape[1], heads = c.shape[2], dim = c.shape[3];
      const auto positions = at::arange(tokens, options.dtype(at::kLong)).unsqueeze(0) * 37 +
                             at::arange(batch, options.dtype(at::kLong)).unsqueeze(1) * 1013;  // (B, T)
      const auto tables = rope_tables(inverse_frequencies(dim, cuda), positions, dtype);
      auto row_shape = c.shape;
      row_shape.back() = 1;
      const auto row_scale = at::pow(10.0, at::rand(row_shape, options) * 3 - 2);  // rows of 1e-2 .. 10
      const auto x = (at::randn(c.shape, options) * row_scale).to(dtype);
      const auto weight = (1 + 0.5 * at::randn({dim}, options)).to(dtype);  // frozen
      const auto grad = at::randn(c.shape, options).to(dtype);

      auto x_aten = x.clone().requires_grad_(true);
      auto normed = rms_norm(x_aten, weight, c.eps, /*fused_kernel=*/true);
      normed.retain_grad();
      const auto y_aten = apply_rope(normed, tables, /*fused_kernel=*/true);
      y_aten.backward(grad);

      auto x_fused = x.clone().requires_grad_(true);
      ASSERT_TRUE(fused_norm_rope_supported(x_fused, weight, tables.cos));
      const auto y_fused = fused_norm_rope(x_fused, weight, c.eps, tables.cos, tables.sin);
      y_fused.backward(grad);
      ASSERT_EQ(y_fused.scalar_type(), dtype);
      ASSERT_TRUE(x_fused.grad().defined());

      // The exact quantities of the bounds, in double: rows (B*T*H, D).
      const auto X = host_double(x).view({-1, dim});
      const auto W = host_double(weight);
      const auto r = at::rsqrt(X.square().mean(-1, /*keepdim=*/true) + c.eps);
      const auto x_hat = X * r;
      const auto N = W * x_hat;
      const auto P = at::cat({N.narrow(1, dim / 2, dim / 2), N.narrow(1, 0, dim / 2)}, 1);
      const auto C = host_double(tables.cos).unsqueeze(2).expand({batch, tokens, heads, dim}).reshape({-1, dim});
      const auto S = host_double(tables.sin).unsqueeze(2).expand({batch, tokens, heads, dim}).reshape({-1, dim});
      const auto y_f = host_double(y_fused).view({-1, dim}), y_a = host_double(y_aten).view({-1, dim});
      const auto y_bound = 2 * eps * (1 + 2 * eps) * ((N * C).abs() + (P * S).abs()) +
                           eps * at::maximum(y_f.abs(), y_a.abs()) + floor;
      EXPECT_TRUE(within_bound(y_f, y_a, y_bound)) << "y";

      const auto Gw = host_double(normed.grad()).view({-1, dim}) * W;
      const auto dx_f = host_double(x_fused.grad()).view({-1, dim}), dx_a = host_double(x_aten.grad()).view({-1, dim});
      const auto dx_bound = eps * at::maximum(dx_f.abs(), dx_a.abs()) +
                            std::ldexp(1.0, -16) * r * (Gw.abs() + x_hat.abs() * (Gw * x_hat).abs().mean(-1, true)) +
                            floor;
      EXPECT_TRUE(within_bound(dx_f, dx_a, dx_bound)) << "dx";

      auto x_reference = x.to(at::kFloat).requires_grad_(true);
      const auto y_reference = apply_rope(rms_norm(x_reference, weight.to(at::kFloat), c.eps, false),
                                          RopeTables{tables.cos.to(at::kFloat), tables.sin.to(at::kFloat)}, false);
      y_reference.backward(grad.to(at::kFloat));
      y_tally.add(y_fused, y_aten, y_reference);
      dx_tally.add(x_fused.grad(), x_aten.grad(), x_reference.grad());
      y_differing += cuda_testing::count_differing(y_fused, y_aten);
      dx_differing += cuda_testing::count_differing(x_fused.grad(), x_aten.grad());
      elements += x.numel();
    }
    EXPECT_TRUE(y_tally.fused_no_worse(1.01)) << c10::toString(dtype) << " y";
    EXPECT_TRUE(dx_tally.fused_no_worse(1.01)) << c10::toString(dtype) << " dx";
    const std::string name(c10::toString(dtype));
    RecordProperty(name + "_y_differing", std::to_string(y_differing) + " of " + std::to_string(elements));
    RecordProperty(name + "_dx_differing", std::to_string(dx_differing) + " of " + std::to_string(elements));
    RecordProperty(name + "_y_error_fused_vs_aten",
                   std::to_string(y_tally.fused_error()) + " / " + std::to_string(y_tally.aten_error()));
  }
}

// What the kernel does not take, the decoder runs as two kernels: a trainable weight, fp32, a
// head_dim outside 64/128/256, tables narrower than the head (partial rotary).
TEST(FusedNormRope, SupportsOnlyFrozenHalfWeightsAndItsHeadDims) {
  const at::Device cuda(at::kCUDA, 0);
  const auto options = at::TensorOptions().device(cuda).dtype(at::kBFloat16);
  const auto x = at::randn({1, 4, 2, 128}, options);
  const auto weight = at::ones({128}, options);
  const auto cos = at::ones({1, 4, 128}, options);
  EXPECT_TRUE(fused_norm_rope_supported(x, weight, cos));
  EXPECT_FALSE(fused_norm_rope_supported(x, weight.clone().requires_grad_(true), cos));
  EXPECT_FALSE(fused_norm_rope_supported(x.to(at::kFloat), weight.to(at::kFloat), cos.to(at::kFloat)));
  EXPECT_FALSE(fused_norm_rope_supported(at::randn({1, 4, 2, 96}, options), at::ones({96}, options),
                                         at::ones({1, 4, 96}, options)));
  EXPECT_FALSE(fused_norm_rope_supported(x, weight, at::ones({1, 4, 64}, options)));
  EXPECT_FALSE(fused_norm_rope_supported(x.cpu(), weight.cpu(), cos.cpu()));
}

}  // namespace
}  // namespace finetune
