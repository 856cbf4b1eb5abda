// FiniteGuard remembers the first step whose loss or gradient norm is not finite, and says so
// only when checked.
#include <gtest/gtest.h>

#include <limits>

#include "../test_support.h"
#include "finetune/train/finite_guard.h"

namespace finetune {
namespace {

TEST(FiniteGuard, NamesTheFirstNonFiniteStep) {
  FiniteGuard guard(at::kCPU);
  const auto finite = at::scalar_tensor(1.5, at::kDouble);
  const auto nan = at::scalar_tensor(std::numeric_limits<double>::quiet_NaN(), at::kDouble);
  const auto inf = at::scalar_tensor(std::numeric_limits<float>::infinity(), at::kFloat);
  guard.record(1, finite, finite.to(at::kFloat));
  guard.record(2, finite, finite.to(at::kFloat));
  EXPECT_NO_THROW(guard.check("context"));
  guard.record(3, finite, inf);  // gradient norm overflowed
  guard.record(4, nan, finite);  // a later step does not replace the first
  const auto message = testing::error_message([&] { guard.check("the last good checkpoint is X"); });
  EXPECT_NE(message.find("step 3 is not finite"), std::string::npos) << message;
  EXPECT_NE(message.find("the last good checkpoint is X"), std::string::npos) << message;
}

TEST(FiniteGuard, NanLossIsCaughtToo) {
  FiniteGuard guard(at::kCPU);
  guard.record(7, at::scalar_tensor(std::numeric_limits<double>::quiet_NaN(), at::kDouble), at::scalar_tensor(0.5));
  EXPECT_NE(testing::error_message([&] { guard.check(""); }).find("step 7"), std::string::npos);
}

}  // namespace
}  // namespace finetune
