// The fused RoPE kernel (model/cuda/elementwise_kernels.cu, through apply_rope with the fused
// kernel) against the ATen composition the unfused path runs (apply_rope without it:
// (x * cos) + (rotate_half(x) * sin), and its autograd), forward and backward, bf16 and fp16.
//
// Equal values, both ways. Forward: ATen writes x * cos and rotate_half(x) * sin as dtype tensors
// (each product computed in fp32 from the dtype's values, then rounded), then their sum (fp32 sum
// of the two rounded products, rounded); the negation and concatenation in rotate_half are exact.
// The kernel rounds the same two products and then their sum. Backward: autograd's gradient of x
// is g * cos (rounded) plus the two halves of rotate_half's gradient, g * sin (rounded; one half
// negated), each spread over x's shape with zeros; at every element one of those two is zero, so
// the gradient is one rounded sum of two rounded products: the kernel's dx1 = g1 c1 + g2 s2,
// dx2 = g2 c2 - g1 s1.
//
// Shapes: head_dim / 2 a multiple of 8 with 16-byte aligned tensors (the vectorised path),
// head_dim / 2 odd (the element-wise path), and tensors starting two bytes into their storage
// (element-wise, though head_dim would allow vectors); the output gradient is non-contiguous.
#include <gtest/gtest.h>

#include "finetune/model/rope.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::copy_at_offset;
using cuda_testing::equal_values;
using cuda_testing::ErrorTally;

struct RopeCase {
  std::vector<int64_t> shape;  // (B, T, H, D)
  int64_t storage_offset;      // of x, cos and sin
};

const std::vector<RopeCase> kCases = {
    {{2, 7, 3, 64}, 0},     // vectorised
    {{3, 33, 8, 128}, 0},   // vectorised, several blocks
    {{4, 128, 8, 128}, 0},  // 0.5 M elements: most of the error tally
    {{1, 5, 4, 20}, 0},     // half 10: element-wise
    {{2, 3, 2, 6}, 0},      // half 3
    {{1, 1, 1, 2}, 0},      // one pair
    {{2, 9, 5, 64}, 1},     // misaligned: element-wise
};

// HF's default inverse frequencies, theta 10000: (D / 2) fp32.
at::Tensor inverse_frequencies(int64_t head_dim, const at::Device& device) {
  const auto exponent = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kFloat).device(device)) /
                        static_cast<double>(head_dim);
  return at::pow(10000.0, exponent).reciprocal();
}

TEST(FusedRope, EqualsTheAtenCompositionForwardAndBackward) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(11);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    ErrorTally forward_tally, backward_tally;
    for (const auto& c : kCases) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " x " + cuda_testing::shape_text(c.shape) + " offset " +
                   std::to_string(c.storage_offset));
      const int64_t batch = c.shape[0], tokens = c.shape[1], heads = c.shape[2], head_dim = c.shape[3];
      // Positions far apart, so that cos/sin take many values (batches start at different offsets).
      const auto positions =
          at::arange(tokens, at::TensorOptions().dtype(at::kLong).device(cuda)).unsqueeze(0) * 61 +
          at::arange(batch, at::TensorOptions().dtype(at::kLong).device(cuda)).unsqueeze(1) * 1009;  // (B, T)
      const auto tables = rope_tables(inverse_frequencies(head_dim, cuda), positions, dtype);
      const RopeTables shifted{copy_at_offset(tables.cos, c.storage_offset), copy_at_offset(tables.sin, c.storage_offset)};
      const auto x = at::randn(c.shape, at::TensorOptions().device(cuda)).to(dtype);
      // (B, T, D, H) transposed: a non-contiguous (B, T, H, D) gradient.
      const auto grad = at::randn({batch, tokens, head_dim, heads}, at::TensorOptions().device(cuda)).to(dtype).transpose(2, 3);

      auto x_aten = x.clone().requires_grad_(true);
      const auto y_aten = apply_rope(x_aten, shifted, /*fused_kernel=*/false);
      y_aten.backward(grad);

      auto x_fused = copy_at_offset(x, c.storage_offset).detach().requires_grad_(true);
      const auto y_fused = apply_rope(x_fused, shifted, /*fused_kernel=*/true);
      y_fused.backward(grad);
      ASSERT_EQ(y_fused.scalar_type(), dtype);

      EXPECT_TRUE(equal_values(y_fused, y_aten)) << "forward";
      EXPECT_TRUE(equal_values(x_fused.grad(), x_aten.grad())) << "backward";

      auto x_reference = x.to(at::kFloat).requires_grad_(true);
      const auto y_reference =
          apply_rope(x_reference, RopeTables{tables.cos.to(at::kFloat), tables.sin.to(at::kFloat)}, false);
      y_reference.backward(grad.to(at::kFloat));
      forward_tally.add(y_fused, y_aten, y_reference);
      backward_tally.add(x_fused.grad(), x_aten.grad(), x_reference.grad());
    }
    // Equal values make equal errors: the ratio bound is 1.
    EXPECT_TRUE(forward_tally.fused_no_worse(1.0)) << c10::toString(dtype) << " forward";
    EXPECT_TRUE(backward_tally.fused_no_worse(1.0)) << c10::toString(dtype) << " backward";
    RecordProperty(std::string(c10::toString(dtype)) + "_forward_rel_error", std::to_string(forward_tally.fused_error()));
  }
}

}  // namespace
}  // namespace finetune
