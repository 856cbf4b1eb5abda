// How tests/cuda compares a fused kernel with the ATen composition it replaces:
//   - equal_values: every element equal, where the kernel rounds to the dtype exactly where ATen's
//     ops write their outputs and computes each op as ATen does (fp32 from the dtype's values);
//   - within_bound: |fused - aten| <= a bound per element, derived in the test from the dtype's
//     epsilon where the kernel rounds at other points (fewer roundings, other fp32 orders);
//   - ErrorTally: and, either way, the fused result no further from an fp32 reference (the same
//     expression in fp32 on the same inputs) than ATen's, as relative L2 errors over every shape
//     of a dtype (large enough that the ratio is not a matter of luck).
// Everything is compared in double on the host.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace finetune::cuda_testing {

inline const std::vector<at::ScalarType>& half_dtypes() {
  static const std::vector<at::ScalarType> dtypes = {at::kBFloat16, at::kHalf};
  return dtypes;
}

// Machine epsilon: the spacing of the dtype's numbers at 1 (2^-7 for bf16, 2^-10 for fp16). A
// rounding to the dtype moves a normal number by at most eps / 2 of its magnitude.
inline double dtype_epsilon(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return std::ldexp(1.0, -7);
    case at::kHalf: return std::ldexp(1.0, -10);
    case at::kFloat: return std::ldexp(1.0, -23);
    default: throw std::invalid_argument(std::string("no epsilon for ") + c10::toString(dtype));
  }
}

// The smallest subnormal: the spacing (and twice the largest rounding error) below the normal range.
inline double dtype_denorm_min(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return std::ldexp(1.0, -133);
    case at::kHalf: return std::ldexp(1.0, -24);
    case at::kFloat: return std::ldexp(1.0, -149);
    default: throw std::invalid_argument(std::string("no subnormal for ") + c10::toString(dtype));
  }
}

inline at::Tensor host_double(const at::Tensor& t) { return t.detach().to(at::kCPU, at::kDouble).contiguous(); }

// One unit in the last place of `dtype` at each magnitude (a double tensor >= 0): the gap between
// the two dtype numbers around it, eps * 2^floor(log2 m), never below the subnormal spacing.
inline at::Tensor ulp_at(const at::Tensor& magnitude, at::ScalarType dtype) {
  const auto binade = at::exp2(at::floor(at::log2(magnitude)));  // 0 for magnitude 0
  return at::clamp_min(binade * dtype_epsilon(dtype), dtype_denorm_min(dtype));
}

namespace detail {

inline std::string describe_worst(const at::Tensor& fused, const at::Tensor& aten, const at::Tensor& excess) {
  const int64_t index = excess.flatten().argmax().item<int64_t>();
  std::ostringstream text;
  text.precision(9);
  text << "worst at flat index " << index << ": fused " << fused.flatten()[index].item<double>() << ", ATen "
       << aten.flatten()[index].item<double>();
  return text.str();
}

inline ::testing::AssertionResult same_shape_and_finite(const at::Tensor& fused, const at::Tensor& aten) {
  if (fused.sizes() != aten.sizes()) {
    return ::testing::AssertionFailure() << "shapes differ: fused " << fused.sizes() << ", ATen " << aten.sizes();
  }
  const int64_t non_finite = fused.isfinite().logical_not().sum().item<int64_t>();
  if (non_finite != 0) return ::testing::AssertionFailure() << non_finite << " non-finite elements in the fused result";
  return ::testing::AssertionSuccess();
}

}  // namespace detail

// Every element of `fused` equals `aten` (as numbers: -0 equals +0; the inputs are finite).
inline ::testing::AssertionResult equal_values(const at::Tensor& fused_tensor, const at::Tensor& aten_tensor) {
  const auto fused = host_double(fused_tensor), aten = host_double(aten_tensor);
  if (auto ok = detail::same_shape_and_finite(fused, aten); !ok) return ok;
  const int64_t differing = fused.ne(aten).sum().item<int64_t>();
  if (differing == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differing << " of " << fused.numel() << " elements differ; "
                                       << detail::describe_worst(fused, aten, (fused - aten).abs());
}

// |fused - aten| <= bound element by element (bound: a double tensor of their shape).
inline ::testing::AssertionResult within_bound(const at::Tensor& fused_tensor, const at::Tensor& aten_tensor,
                                               const at::Tensor& bound) {
  const auto fused = host_double(fused_tensor), aten = host_double(aten_tensor);
  if (auto ok = detail::same_shape_and_finite(fused, aten); !ok) return ok;
  const auto excess = (fused - aten).abs() - host_double(bound).view(fused.sizes());
  const int64_t outside = excess.gt(0).sum().item<int64_t>();
  if (outside == 0) return ::testing::AssertionSuccess();
  const int64_t index = excess.flatten().argmax().item<int64_t>();
  return ::testing::AssertionFailure() << outside << " of " << fused.numel() << " elements outside the bound; "
                                       << detail::describe_worst(fused, aten, excess) << ", bound "
                                       << host_double(bound).flatten()[index].item<double>();
}

// How many elements differ at all (recorded next to a bound, which allows some to).
inline int64_t count_differing(const at::Tensor& fused, const at::Tensor& aten) {
  return host_double(fused).ne(host_double(aten)).sum().item<int64_t>();
}

// Relative L2 errors against an fp32 reference, summed over several shapes.
class ErrorTally {
 public:
  void add(const at::Tensor& fused_tensor, const at::Tensor& aten_tensor, const at::Tensor& reference_tensor) {
    const auto fused = host_double(fused_tensor), aten = host_double(aten_tensor);
    const auto reference = host_double(reference_tensor);
    fused_squared_ += (fused - reference).square().sum().item<double>();
    aten_squared_ += (aten - reference).square().sum().item<double>();
    reference_squared_ += reference.square().sum().item<double>();
  }
  double fused_error() const { return std::sqrt(fused_squared_ / reference_squared_); }
  double aten_error() const { return std::sqrt(aten_squared_ / reference_squared_); }

  // fused error <= ratio * ATen's error (ATen's own half-precision error is the accepted accuracy).
  ::testing::AssertionResult fused_no_worse(double ratio) const {
    if (!(reference_squared_ > 0)) return ::testing::AssertionFailure() << "nothing tallied";
    std::ostringstream text;
    text.precision(6);
    text << "relative L2 error against fp32: fused " << fused_error() << ", ATen " << aten_error() << " (ratio bound "
         << ratio << ")";
    if (fused_error() <= ratio * aten_error()) return ::testing::AssertionSuccess() << text.str();
    return ::testing::AssertionFailure() << text.str();
  }

 private:
  double fused_squared_ = 0;
  double aten_squared_ = 0;
  double reference_squared_ = 0;
};

// A copy of `values` starting `offset` elements into its storage (offset 1: two bytes in, so no
// 16-byte vector access is possible and a kernel must take its element-wise path).
inline at::Tensor copy_at_offset(const at::Tensor& values, int64_t offset) {
  auto storage = at::empty({values.numel() + offset}, values.options());
  auto out = storage.narrow(0, offset, values.numel()).view(values.sizes());
  out.copy_(values);
  return out;
}

inline std::string shape_text(at::IntArrayRef shape) {
  std::ostringstream text;
  text << shape;
  return text.str();
}

}  // namespace finetune::cuda_testing
