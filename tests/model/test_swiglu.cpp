// SwiGLU (model/swiglu.h) on the CPU, where every policy runs ATen's composition: swiglu is
// at::silu(gate) * up, and swiglu_gate_up on a packed (M, 2I) tensor equals swiglu on its two
// halves copied out (what the experts computed before), forward and gate_up's gradient:
//   - exactly, in fp64 and fp32, against the halves copied out one row at a time: ATen's CPU silu
//     computes each row of the narrowed views as one loop (vectorised, then an element-wise tail),
//     and so it does on a single copied row (transformers' chunk(2, dim=-1) views too);
//   - within rounding against the halves copied out whole (1e-15 of the largest magnitude in fp64,
//     1e-6 in fp32): there the loop runs over all M * I elements, so other elements fall in the
//     element-wise tail, whose exp may differ from the vectorised one in the last bit.
// Also rows further apart than 2I (a view into a wider tensor), and the layout errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "finetune/model/swiglu.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

KernelPolicy fused_policy() {
  KernelPolicy policy;
  policy.fused_elementwise = true;  // on CPU tensors swiglu_gate_up still takes the composition
  return policy;
}

// The largest |got - want| over the largest |want| (0 where both are 0).
double relative_difference(const at::Tensor& got, const at::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  const double difference = (got - want).abs().max().item<double>();
  return scale > 0 ? difference / scale : difference;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double bound, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  EXPECT_LE(relative_difference(got, want), bound) << what;
}

void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  EXPECT_TRUE(at::equal(got, want)) << what << ": differs by " << relative_difference(got, want) << " (relative)";
}

// swiglu on gate_up's halves copied out (M, I), whole or one row at a time; backward(grad) leaves
// gate_up's gradient in gate_up.grad().
at::Tensor swiglu_on_copied_halves(const at::Tensor& gate_up, int64_t width, bool per_row) {
  if (!per_row) {
    return swiglu(gate_up.narrow(1, 0, width).contiguous(), gate_up.narrow(1, width, width).contiguous(),
                  KernelPolicy{});
  }
  std::vector<at::Tensor> rows;
  for (int64_t r = 0; r < gate_up.size(0); ++r) {
    const auto row = gate_up.narrow(0, r, 1);  // (1, 2I)
    rows.push_back(swiglu(row.narrow(1, 0, width).contiguous(), row.narrow(1, width, width).contiguous(),
                          KernelPolicy{}));
  }
  return at::cat(rows, 0);
}

struct GateUpCase {
  int64_t rows;
  int64_t width;
  int64_t row_padding;  // extra columns past 2I in each row of the storage (0: contiguous)
};

const std::vector<GateUpCase> kCases = {
    {5, 6, 0}, {3, 1, 0}, {4, 7, 0}, {9, 16, 0}, {2, 129, 0}, {1, 33, 0}, {6, 7, 3}, {5, 16, 8},
};

TEST(Swiglu, IsSiluOfGateTimesUpWithoutTheFusedPolicy) {
  at::manual_seed(3);
  const auto gate = at::randn({4, 5, 11});
  const auto up = at::randn({4, 5, 11});
  EXPECT_TRUE(at::equal(swiglu(gate, up, KernelPolicy{}), at::silu(gate) * up));
}

TEST(SwigluGateUp, EqualsSwigluOnTheCopiedHalvesForwardAndGradient) {
  at::manual_seed(7);
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    const double bound = dtype == at::kDouble ? 1e-15 : 1e-6;
    for (const auto& policy : {KernelPolicy{}, fused_policy()}) {
      for (const auto& c : kCases) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + " rows " + std::to_string(c.rows) + " width " +
                     std::to_string(c.width) + " padding " + std::to_string(c.row_padding) +
                     (policy.fused_elementwise ? " fused policy" : " ATen policy"));
        const int64_t width = c.width;
        const auto options = at::TensorOptions().dtype(dtype);
        const auto values = (at::randn({c.rows, 2 * width + c.row_padding}, options) * 4).clamp(-12, 12);
        const auto grad = at::randn({c.rows, width}, options);

        auto storage = values.clone().requires_grad_(true);
        const auto gate_up = storage.narrow(1, 0, 2 * width);  // (M, 2I), rows 2I + padding apart
        const auto got = swiglu_gate_up(gate_up, width, policy);
        got.backward(grad);
        const auto got_grad = storage.grad().narrow(1, 0, 2 * width);
        if (c.row_padding > 0) {
          EXPECT_TRUE(at::equal(storage.grad().narrow(1, 2 * width, c.row_padding),
                                at::zeros({c.rows, c.row_padding}, options)))
              << "the padding columns get no gradient";
        }

        for (const bool per_row : {true, false}) {
          auto reference = values.narrow(1, 0, 2 * width).clone().requires_grad_(true);
          const auto want = swiglu_on_copied_halves(reference, width, per_row);
          want.backward(grad);
          if (per_row) {
            expect_equal(got, want, "forward, per row");
            expect_equal(got_grad, reference.grad(), "gate_up's gradient, per row");
          } else {
            expect_close(got, want, bound, "forward");
            expect_close(got_grad, reference.grad(), bound, "gate_up's gradient");
          }
        }
      }
    }
  }
}

// The Error's message, or "" when none was thrown.
std::string error_of(const at::Tensor& gate_up, int64_t width) {
  try {
    swiglu_gate_up(gate_up, width, KernelPolicy{});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SwigluGateUp, RejectsLayoutsItCannotReadInPlace) {
  const auto plain = at::zeros({3, 8});
  EXPECT_NE(error_of(at::zeros({8}), 4).find("must be 2-D"), std::string::npos);
  EXPECT_NE(error_of(at::zeros({2, 3, 8}), 4).find("must be 2-D"), std::string::npos);
  EXPECT_NE(error_of(plain, 0).find("width must be positive"), std::string::npos);
  const auto wrong_width = error_of(plain, 3);
  EXPECT_NE(wrong_width.find("must be 2 * width = 6, got 8"), std::string::npos) << wrong_width;
  const auto transposed = error_of(at::zeros({8, 3}).t(), 4);  // (3, 8), column stride 3
  EXPECT_NE(transposed.find("must have stride 1"), std::string::npos) << transposed;
  EXPECT_NE(transposed.find("swiglu_gate_up"), std::string::npos) << transposed;
  EXPECT_EQ(error_of(plain, 4), "");
}

}  // namespace
}  // namespace finetune
