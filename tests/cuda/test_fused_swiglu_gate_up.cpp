// The packed SwiGLU (fused_swiglu_gate_up, model/cuda/elementwise_kernels.cu), which reads gate
// and up in place from one (M, 2I) tensor and writes gate_up's gradient as one (M, 2I) tensor,
// against fused_swiglu on the two halves copied out (what the experts ran before): the forward,
// d_gate (the gradient's first I columns) and d_up (its last I) bit for bit. Both kernels compute
// every element with the same device functions (swiglu_value, swiglu_gradients), so any
// difference is a layout bug (a wrong row, column or half), not rounding.
//
// Widths: Qwen3-30B-A3B's expert width (768) and Mixtral's (14336) on the 16-byte path; odd
// widths (1, 7, 129) element-wise; gate_up starting two bytes into its storage (element-wise); rows
// further apart than 2I (a view into a wider tensor; padding a multiple of 8: the 16-byte path,
// odd padding: element-wise); no rows. bf16, fp16 and fp32. The output gradient is non-contiguous.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "finetune/model/fused_kernels.h"
#include "finetune/model/swiglu.h"
#include "finetune/util/errors.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

struct GateUpCase {
  int64_t rows;
  int64_t width;           // I
  int64_t storage_offset;  // elements before gate_up's first one
  int64_t row_padding;     // elements past 2I in each row (0: contiguous)
};

const std::vector<GateUpCase> kCases = {
    {64, 768, 0, 0},    // Qwen3-30B-A3B's moe_intermediate_size
    {16, 14336, 0, 0},  // Mixtral's intermediate_size
    {5, 1, 0, 0},       // odd widths: element-wise
    {9, 7, 0, 0},
    {33, 129, 0, 0},
    {40, 768, 1, 0},    // misaligned storage: element-wise
    {24, 768, 0, 8},    // strided rows, 16-byte path
    {12, 96, 0, 3},     // strided rows, element-wise
    {0, 768, 0, 0},     // no rows
};

const std::vector<at::ScalarType> kDtypes = {at::kBFloat16, at::kHalf, at::kFloat};

// The same bits element by element (a value comparison would take -0 for +0).
::testing::AssertionResult same_bits(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type()) {
    return ::testing::AssertionFailure() << "sizes or dtypes differ: " << got.sizes() << " " << got.scalar_type()
                                         << ", " << want.sizes() << " " << want.scalar_type();
  }
  const auto bits = got.element_size() == 2 ? at::kShort : at::kInt;
  const auto a = got.detach().contiguous().view(bits), b = want.detach().contiguous().view(bits);
  const int64_t differing = a.ne(b).sum().item<int64_t>();
  if (differing == 0) return ::testing::AssertionSuccess();
  const int64_t index = a.ne(b).flatten().to(at::kInt).argmax().item<int64_t>();
  return ::testing::AssertionFailure() << differing << " of " << got.numel() << " elements differ; first at flat index "
                                       << index << ": " << got.flatten()[index].item<double>() << " vs "
                                       << want.flatten()[index].item<double>();
}

// (rows, 2I) random values, gate out to +-12 (silu's saturated ends and its bend), laid out per the case.
at::Tensor packed_gate_up(const GateUpCase& c, at::ScalarType dtype) {
  const auto options = at::TensorOptions().device(at::kCUDA, 0).dtype(dtype);
  const int64_t row_stride = 2 * c.width + c.row_padding;
  auto storage = at::full({c.storage_offset + c.rows * row_stride}, 1e4, options);  // padding: never read
  auto gate_up = storage.narrow(0, c.storage_offset, c.rows * row_stride).view({c.rows, row_stride});
  gate_up = gate_up.narrow(1, 0, 2 * c.width);
  const auto gate = (at::randn({c.rows, c.width}, options.dtype(at::kFloat)) * 4).clamp(-12, 12);
  const auto up = at::randn({c.rows, c.width}, options.dtype(at::kFloat));
  gate_up.copy_(at::cat({gate, up}, 1));
  return gate_up;
}

TEST(FusedSwigluGateUp, EqualsFusedSwigluOnTheCopiedHalvesBitForBit) {
  at::manual_seed(28);
  for (const auto dtype : kDtypes) {
    for (const auto& c : kCases) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " rows " + std::to_string(c.rows) + " width " +
                   std::to_string(c.width) + " offset " + std::to_string(c.storage_offset) + " padding " +
                   std::to_string(c.row_padding));
      const int64_t width = c.width;
      auto gate_up = packed_gate_up(c, dtype).detach().requires_grad_(true);
      ASSERT_EQ(gate_up.stride(0), 2 * width + c.row_padding);
      // The first half of each row of a wider tensor: a non-contiguous output gradient.
      const auto grad = at::randn({c.rows, 2 * width}, gate_up.options().requires_grad(false)).narrow(1, 0, width);

      const auto got = fused_swiglu_gate_up(gate_up, width);
      got.backward(grad);

      auto gate = gate_up.detach().narrow(1, 0, width).contiguous().requires_grad_(true);
      auto up = gate_up.detach().narrow(1, width, width).contiguous().requires_grad_(true);
      const auto want = fused_swiglu(gate, up);
      want.backward(grad);

      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{c.rows, width}));
      EXPECT_TRUE(same_bits(got, want)) << "forward";
      ASSERT_TRUE(gate_up.grad().defined());
      ASSERT_EQ(gate_up.grad().sizes(), gate_up.sizes());
      EXPECT_TRUE(same_bits(gate_up.grad().narrow(1, 0, width), gate.grad())) << "d_gate";
      EXPECT_TRUE(same_bits(gate_up.grad().narrow(1, width, width), up.grad())) << "d_up";
    }
  }
}

TEST(FusedSwigluGateUp, TheFusedPolicyRunsItOnCuda) {
  KernelPolicy policy;
  policy.fused_elementwise = true;
  auto gate_up = packed_gate_up({8, 768, 0, 0}, at::kBFloat16).detach().requires_grad_(true);
  const auto out = swiglu_gate_up(gate_up, 768, policy);
  ASSERT_NE(out.grad_fn(), nullptr);
  EXPECT_NE(out.grad_fn()->name().find("FusedSwigluGateUp"), std::string::npos) << out.grad_fn()->name();
  EXPECT_TRUE(same_bits(out, fused_swiglu_gate_up(gate_up, 768)));
}

TEST(FusedSwigluGateUp, RejectsWhatTheKernelCannotRun) {
  const auto cuda = at::TensorOptions().device(at::kCUDA, 0);
  EXPECT_THROW(fused_swiglu_gate_up(at::zeros({4, 8}, cuda.dtype(at::kDouble)), 4), Error);
  EXPECT_THROW(fused_swiglu_gate_up(at::zeros({4, 8}, at::kBFloat16), 4), Error);             // on the CPU
  EXPECT_THROW(fused_swiglu_gate_up(at::zeros({4, 8}, cuda.dtype(at::kBFloat16)), 3), Error);  // not 2 * width
  EXPECT_THROW(fused_swiglu_gate_up(at::zeros({8, 4}, cuda.dtype(at::kBFloat16)).t(), 2), Error);  // column stride 4
  EXPECT_THROW(fused_swiglu_gate_up(at::zeros({2, 4, 8}, cuda.dtype(at::kBFloat16)), 4), Error);
}

}  // namespace
}  // namespace finetune
