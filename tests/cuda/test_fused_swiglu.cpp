// The fused SwiGLU kernels (model/cuda/elementwise_kernels.cu, fused_swiglu) against the ATen
// composition of the unfused path (CausalLM's MLP: at::silu(gate) * up, and its autograd),
// forward and backward, bf16 and fp16.
//
// Forward and d_up: equal values. ATen's silu kernel computes g / (1 + exp(-g)) in fp32 from the
// dtype's g and writes it rounded; the product with up is one fp32 product of two dtype values,
// rounded; d_up = grad * silu(gate), the same rounded activation times grad, rounded. The kernel
// evaluates the same fp32 expressions (expf, IEEE division) with roundings at the same points.
// d_gate: ATen's silu_backward evaluates dy * s * (1 + g * (1 - s)) on dy = grad * up (rounded),
// and so does the kernel, but whether nvcc contracts 1 + g * (1 - s) into one fused multiply-add
// is the compiler's choice in each build (ATen's and ours), so the fp32 values may differ in
// their last bits; rounded to the dtype they then differ by at most one unit in the last place,
// and only where the fp32 value lies within a few fp32 ulps of a rounding boundary: about
// 2^-23 / 2^-8 = 2^-15 of the elements in bf16, 2^-12 in fp16. Bound: one ulp per element, at
// most 1% of the elements differing, and an L2 error against fp32 within 1% of ATen's (1-ulp
// changes in so few elements move it far less).
//
// Shapes: element counts that are multiples of 8 with aligned tensors (the vectorised path), odd
// counts and tensors starting two bytes into their storage (element-wise); a non-contiguous
// output gradient.
#include <gtest/gtest.h>

#include "finetune/model/fused_kernels.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::copy_at_offset;
using cuda_testing::equal_values;
using cuda_testing::ErrorTally;

struct SwigluCase {
  std::vector<int64_t> shape;  // (..., I)
  int64_t storage_offset;      // of gate and up
};

const std::vector<SwigluCase> kCases = {
    {{3, 5, 1024}, 0},      // vectorised
    {{8, 512, 1376}, 0},    // 5.6 M elements, many blocks
    {{7, 13}, 0},           // 91: element-wise
    {{2, 3, 8195}, 0},      // odd intermediate size
    {{1}, 0},               // one element
    {{4, 64, 688}, 1},      // multiple of 8, misaligned: element-wise
};

TEST(FusedSwiglu, EqualsTheAtenCompositionForwardAndBackward) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(12);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    const double one_ulp_fraction_bound = 0.01;
    ErrorTally forward_tally, d_gate_tally, d_up_tally;
    int64_t d_gate_differing = 0, elements = 0;
    for (const auto& c : kCases) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " x " + cuda_testing::shape_text(c.shape) + " offset " +
                   std::to_string(c.storage_offset));
      const auto options = at::TensorOptions().device(cuda);
      // Gate values out to +-12: the saturated ends of silu as well as its bend.
      const auto gate = (at::randn(c.shape, options) * 4).clamp(-12, 12).to(dtype);
      const auto up = at::randn(c.shape, options).to(dtype);
      // The first half of each row of a wider tensor: a non-contiguous output gradient.
      auto wide_shape = c.shape;
      wide_shape.back() *= 2;
      const auto grad = at::randn(wide_shape, options).to(dtype).narrow(-1, 0, c.shape.back());

      auto gate_aten = gate.clone().requires_grad_(true);
      auto up_aten = up.clone().requires_grad_(true);
      const auto y_aten = at::silu(gate_aten) * up_aten;
      y_aten.backward(grad);

      auto gate_fused = copy_at_offset(gate, c.storage_offset).detach().requires_grad_(true);
      auto up_fused = copy_at_offset(up, c.storage_offset).detach().requires_grad_(true);
      const auto y_fused = fused_swiglu(gate_fused, up_fused);
      y_fused.backward(grad);
      ASSERT_EQ(y_fused.scalar_type(), dtype);

      EXPECT_TRUE(equal_values(y_fused, y_aten)) << "forward";
      EXPECT_TRUE(equal_values(up_fused.grad(), up_aten.grad())) << "d_up";
      const auto d_gate_fused = cuda_testing::host_double(gate_fused.grad());
      const auto d_gate_aten = cuda_testing::host_double(gate_aten.grad());
      const auto one_ulp = cuda_testing::ulp_at(at::maximum(d_gate_fused.abs(), d_gate_aten.abs()), dtype);
      EXPECT_TRUE(cuda_testing::within_bound(d_gate_fused, d_gate_aten, one_ulp)) << "d_gate";
      d_gate_differing += cuda_testing::count_differing(d_gate_fused, d_gate_aten);
      elements += d_gate_fused.numel();

      auto gate_reference = gate.to(at::kFloat).requires_grad_(true);
      auto up_reference = up.to(at::kFloat).requires_grad_(true);
      const auto y_reference = at::silu(gate_reference) * up_reference;
      y_reference.backward(grad.to(at::kFloat));
      forward_tally.add(y_fused, y_aten, y_reference);
      d_gate_tally.add(d_gate_fused, d_gate_aten, gate_reference.grad());
      d_up_tally.add(up_fused.grad(), up_aten.grad(), up_reference.grad());
    }
    EXPECT_LE(d_gate_differing, one_ulp_fraction_bound * elements)
        << c10::toString(dtype) << ": d_gate elements that differ by one ulp";
    RecordProperty(std::string(c10::toString(dtype)) + "_d_gate_differing", std::to_string(d_gate_differing));
    EXPECT_TRUE(forward_tally.fused_no_worse(1.0)) << c10::toString(dtype) << " forward";
    EXPECT_TRUE(d_up_tally.fused_no_worse(1.0)) << c10::toString(dtype) << " d_up";
    EXPECT_TRUE(d_gate_tally.fused_no_worse(1.01)) << c10::toString(dtype) << " d_gate";
  }
}

}  // namespace
}  // namespace finetune
