// The LoRA intermediate's sum-scale-split kernel (lora/cuda/lora_split_kernel.cu, scaled_sum_split
// with cuda_kernel) against the ATen ops of the path without it (split_hi_lo(sum_halves(p) *
// scaling)), bf16 and fp16, on the same fp32 CUDA product.
//
// Equal values: both compute v = (p[:, j] + p[:, j + r]) * float(scaling) in fp32 (ATen's CUDA
// multiply by a double scalar takes it as float, as the kernel's launcher does; an add then a
// multiply, nothing to contract), hi = v rounded to the dtype, lo = (v - hi) rounded, where v - hi
// is formed in fp32 from hi's exact value. And against the exact v (double, from the same fp32
// product): hi + lo carries v to about twice the dtype's precision, |hi + lo - v| <= u^2 |v| from
// the two roundings (u = eps / 2) plus v's own fp32 roundings (float(scaling), the sum, the
// product: 3 x 2^-24 |v|), plus a subnormal spacing for an fp16 lo below the normal range.
//
// Shapes: ranks 1, 3, 7, 17 (odd: the second half starts off any vector boundary), 16, 64; one to
// 4096 rows; scalings 2, 0.5 and alpha / sqrt(r) (rsLoRA); a non-contiguous product as well.
#include <gtest/gtest.h>

#include <cmath>

#include "finetune/lora/lora_kernels.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

using cuda_testing::equal_values;
using cuda_testing::ErrorTally;
using cuda_testing::host_double;

struct SplitCase {
  int64_t rows;
  int64_t r;
};

const std::vector<SplitCase> kCases = {{1, 1}, {5, 3}, {7, 16}, {1000, 7}, {4096, 64}, {333, 17}};

TEST(LoraSplitKernel, EqualsTheAtenOpsAndCarriesTwiceTheDtypesPrecision) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(14);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    const double u = cuda_testing::dtype_epsilon(dtype) / 2;
    ErrorTally tally;
    for (const auto& c : kCases) {
      for (const double scaling : {2.0, 0.5, 16.0 / std::sqrt(static_cast<double>(c.r))}) {
        for (const bool contiguous : {true, false}) {
          SCOPED_TRACE(std::string(c10::toString(dtype)) + " rows " + std::to_string(c.rows) + " r " +
                       std::to_string(c.r) + " scaling " + std::to_string(scaling) +
                       (contiguous ? "" : " (non-contiguous product)"));
          const auto options = at::TensorOptions().dtype(at::kFloat).device(cuda);
          const auto product = contiguous ? at::randn({c.rows, 2 * c.r}, options) * 3
                                          : (at::randn({2 * c.r, c.rows}, options) * 3).t();  // (rows, 2r)
          const auto fused = scaled_sum_split(product, scaling, dtype, /*cuda_kernel=*/true);
          const auto aten = scaled_sum_split(product, scaling, dtype, /*cuda_kernel=*/false);
          ASSERT_EQ(fused.scalar_type(), dtype);
          ASSERT_EQ(fused.sizes(), product.sizes());
          EXPECT_TRUE(equal_values(fused, aten));

          const auto p = host_double(product);
          const auto v = (p.narrow(1, 0, c.r) + p.narrow(1, c.r, c.r)) * scaling;  // exact enough: double
          const auto carried = [&](const at::Tensor& split) {
            const auto s = host_double(split);
            return s.narrow(1, 0, c.r) + s.narrow(1, c.r, c.r);  // hi + lo
          };
          const auto bound = (u * u + 3 * std::ldexp(1.0, -24)) * v.abs() + cuda_testing::dtype_denorm_min(dtype);
          EXPECT_TRUE(cuda_testing::within_bound(carried(fused), v, bound)) << "hi + lo against the exact value";
          tally.add(carried(fused), carried(aten), v);
        }
      }
    }
    EXPECT_TRUE(tally.fused_no_worse(1.0)) << c10::toString(dtype);
  }
}

// split_hi_lo_into's one-launch kernel (every adapter's operands after an optimizer step) writes
// what split_hi_lo computes with ATen ops, for both split dims, odd shapes and both half dtypes.
TEST(LoraSplitKernel, BatchedOperandSplitsEqualSplitHiLo) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(15);
  for (const auto dtype : cuda_testing::half_dtypes()) {
    std::vector<SplitTarget> targets;
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{16, 4096}, {3, 7}, {1024, 16}, {1, 1}, {17, 300}}) {
      const auto options = at::TensorOptions().dtype(at::kFloat).device(cuda);
      for (const int64_t dim : {0, 1}) {
        auto out = at::full({dim == 0 ? 2 * rows : rows, dim == 1 ? 2 * cols : cols}, 7.0, options.dtype(dtype));
        targets.push_back({at::randn({rows, cols}, options) * 0.05, out, dim});
      }
    }
    split_hi_lo_into(targets, /*cuda_kernel=*/true);
    for (const auto& target : targets) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + target.source.toString() + " dim " + std::to_string(target.dim));
      EXPECT_TRUE(equal_values(target.out, split_hi_lo(target.source, dtype, target.dim)));
    }
  }
}

}  // namespace
}  // namespace finetune
