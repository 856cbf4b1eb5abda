// Numbers an option cannot hold (issue 30): a float option past a 32-bit float's range is a usage
// error naming the option (it used to reach LibTorch: "cannot be converted to type float").
#include <gtest/gtest.h>

#include <string>

#include "../test_support.h"
#include "finetune/util/errors.h"
#include "option_test_helpers.h"

namespace finetune {
namespace {

std::string usage_error(const std::vector<std::string>& extra) {
  try {
    testing::parse_train(extra);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<accepted>";
}

TEST(OptionNumbers, FloatOptionsBeyondAFloatAreRefusedNamingTheOption) {
  testing::expect_contains(usage_error({"--learning_rate", "1e308"}),
                           {"--learning_rate", "\"1e308\"", "32-bit float"});
  testing::expect_contains(usage_error({"--max_grad_norm", "-1e39"}), {"--max_grad_norm", "32-bit float"});
  testing::expect_contains(usage_error({"--learning_rate", "1e999"}), {"--learning_rate", "\"1e999\""});
  EXPECT_EQ(usage_error({"--learning_rate", "3e38"}), "<accepted>");
  EXPECT_EQ(usage_error({"--learning_rate", "2e-4"}), "<accepted>");
}

}  // namespace
}  // namespace finetune
