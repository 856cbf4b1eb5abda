// fsspec's glob rules as PathGlob matches them (src/data/path_glob.h): each construct against the
// regex glob_translate makes of it, including the corners a listing from a hub can reach (empty
// path components, newlines, bytes >= 0x80), and a match that stays linear on a megabyte path.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "../../src/data/path_glob.h"

namespace finetune {
namespace {

bool glob_matches(const std::string& pattern, const std::string& path) { return PathGlob(pattern).matches(path); }

TEST(PathGlob, StarIsARunWithinOneComponent) {
  EXPECT_TRUE(glob_matches("train*", "train"));
  EXPECT_TRUE(glob_matches("train*", "train_0.jsonl"));
  EXPECT_FALSE(glob_matches("train*", "train/x"));
  EXPECT_TRUE(glob_matches("x?z", "x\nz"));                  // '?' is any byte but '/'
  EXPECT_FALSE(glob_matches("x?z", "x/z"));
  EXPECT_TRUE(glob_matches("*", "\xC3\xA9"));
  EXPECT_FALSE(glob_matches("*", ""));  // a whole-component '*' is [^/]+
  EXPECT_FALSE(glob_matches("*/x", "/x"));
}

TEST(PathGlob, DoubleStarIsAnyNumberOfDirectories) {
  EXPECT_TRUE(glob_matches("**/train.jsonl", "train.jsonl"));
  EXPECT_TRUE(glob_matches("**/train.jsonl", "a/b/train.jsonl"));
  EXPECT_TRUE(glob_matches("**/train.jsonl", "a//train.jsonl"));  // (?:[\s\S]+/)? takes "a//"
  EXPECT_FALSE(glob_matches("**/train.jsonl", "/train.jsonl"));   // ... but not a lone "/"
  EXPECT_TRUE(glob_matches("**/train/**", "x/train/"));
  EXPECT_FALSE(glob_matches("**/train/**", "x/train"));
  EXPECT_TRUE(glob_matches("**", ""));
  EXPECT_TRUE(glob_matches("**/**/x", "x"));
}

TEST(PathGlob, BracketClasses) {
  const std::string sep = "[-._ 0-9]";
  EXPECT_TRUE(glob_matches("**/*" + sep + "train" + sep + "*", "my-train_0.jsonl"));
  EXPECT_FALSE(glob_matches("**/*" + sep + "train" + sep + "*", "mytrain.jsonl"));
  EXPECT_TRUE(glob_matches("[!a-c]x", "dx"));
  EXPECT_FALSE(glob_matches("[!a-c]x", "bx"));
  EXPECT_TRUE(glob_matches("[]]x", "]x"));     // ']' first is a member
  EXPECT_TRUE(glob_matches("[--a]", "0"));     // the range '-'..'a'
  EXPECT_TRUE(glob_matches("[abc", "[abc"));   // unclosed: a literal '['
  EXPECT_THROW(PathGlob("[z-a]"), std::invalid_argument);
  EXPECT_THROW(PathGlob("a**b"), std::invalid_argument);
}

TEST(PathGlob, AMegabytePathIsMatchedInLinearTime) {
  std::string deep;
  for (int i = 0; i < (1 << 19); ++i) deep += "d/";
  const PathGlob glob("**/*[-._ 0-9]train[-._ 0-9]*/**");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(glob.matches(deep + "my-train-1/x.json"));
  EXPECT_FALSE(glob.matches(deep + "my-trainer/x.json"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

}  // namespace
}  // namespace finetune
