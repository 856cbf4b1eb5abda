// String helpers: the "did you mean" matcher used by option and environment errors.
#include <gtest/gtest.h>

#include "finetune/util/text.h"

namespace finetune {
namespace {

TEST(ClosestMatch, FindsTyposAndIgnoresCase) {
  const std::vector<std::string> names = {"learning_rate", "lora_alpha", "lora_dropout", "r"};
  EXPECT_EQ(closest_match("lerning_rate", names), "learning_rate");
  EXPECT_EQ(closest_match("LORA_ALPA", names), "lora_alpha");
  EXPECT_EQ(closest_match("lora_alpha", names), "lora_alpha");
  EXPECT_EQ(closest_match("lora_dropuot", names), "lora_dropout");  // a swap is two edits, within a third of 12
}

TEST(ClosestMatch, NothingCloseEnough) {
  EXPECT_EQ(closest_match("not_an_option", {"learning_rate", "lora_alpha"}), std::nullopt);
  EXPECT_EQ(closest_match("x", {}), std::nullopt);
  EXPECT_EQ(closest_match("ab", {"xy"}), std::nullopt);  // two edits in a two-letter word is no typo
  EXPECT_EQ(closest_match("ab", {"ax"}), "ax");          // one edit is always allowed
}

TEST(ClosestMatch, TiesGoToTheFirstCandidate) {
  EXPECT_EQ(closest_match("abcd", {"abce", "abcf"}), "abce");
}

}  // namespace
}  // namespace finetune
