// Tensor fixtures (safetensors files written by tests/reference/make_<module>_fixtures.py) and the
// comparisons the reference tests make with them. LibTorch tests only.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "finetune/weights/tensor_io.h"
#include "fixtures.h"

namespace finetune {
namespace reference {

// Every tensor of one safetensors file, by name; asking for a name it lacks throws.
class TensorFixture {
 public:
  explicit TensorFixture(std::string path) : path_(std::move(path)), tensors_(load_tensors(path_)) {}
  TensorFixture(const std::string& module, const std::string& name) : TensorFixture(fixture_path(module, name)) {}

  const at::Tensor& operator[](const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error(path_ + ": no tensor '" + name + "'");
    return it->second;
  }
  const std::map<std::string, at::Tensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::map<std::string, at::Tensor> tensors_;
};

// max |actual - expected| over all elements, in double (0 for empty tensors).
inline double max_abs_difference(const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.numel() == 0) return 0.0;
  return (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
}

// Same dtype, same shape and the same bits in every element (so -0.0 != 0.0, and NaN == NaN).
inline ::testing::AssertionResult same_bits(const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.scalar_type() != expected.scalar_type()) {
    return ::testing::AssertionFailure() << "dtype " << actual.scalar_type() << " != " << expected.scalar_type();
  }
  if (!actual.sizes().equals(expected.sizes())) {
    return ::testing::AssertionFailure() << "shape " << actual.sizes() << " != " << expected.sizes();
  }
  const auto bits = [](const at::Tensor& t) {
    auto c = t.detach().cpu().contiguous();
    switch (c.element_size()) {
      case 8: return c.view(at::kLong);
      case 4: return c.view(at::kInt);
      case 2: return c.view(at::kShort);
      default: return c.view(at::kByte);
    }
  };
  const auto differs = bits(actual).ne(bits(expected));
  const int64_t count = differs.sum().item<int64_t>();
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << count << " of " << actual.numel()
                                       << " elements differ; max abs difference "
                                       << max_abs_difference(actual.cpu(), expected.cpu());
}

}  // namespace reference
}  // namespace finetune
