// file_type_at and its three questions: what std::filesystem::status says, with ENOENT and ENOTDIR
// as "nothing there" and every other failure an Error naming the path and what was looked for.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../test_support.h"
#include "finetune/util/path_status.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

TEST(PathStatus, WhatIsThere) {
  testing::TempDir dir("path_status");
  dir.write("file", "x");
  EXPECT_EQ(file_type_at(dir.file("file"), "a file"), fs::file_type::regular);
  EXPECT_EQ(file_type_at(dir.str(), "a dir"), fs::file_type::directory);
  EXPECT_EQ(file_type_at(dir.file("missing"), "x"), fs::file_type::not_found);       // ENOENT
  EXPECT_EQ(file_type_at(dir.file("file") + "/child", "x"), fs::file_type::not_found);  // ENOTDIR
  EXPECT_TRUE(is_regular_file_at(dir.file("file"), "x"));
  EXPECT_FALSE(is_regular_file_at(dir.str(), "x"));
  EXPECT_TRUE(is_directory_at(dir.str(), "x"));
  EXPECT_FALSE(is_directory_at(dir.file("file"), "x"));
  EXPECT_TRUE(exists_at(dir.file("file"), "x"));
  EXPECT_FALSE(exists_at(dir.file("missing"), "x"));
}

TEST(PathStatus, ANameTooLongIsAnErrorNamingThePath) {
  testing::TempDir dir("path_status");
  const std::string too_long = dir.file(std::string(300, 'a'));
  testing::expect_contains(testing::error_message([&] { exists_at(too_long, "the model's config"); }),
                           {too_long + ": cannot look at the model's config (File name too long)"});
  const std::string over_path_max = "/" + std::string(200, 'b') + std::string(4000, '/') + "c";
  testing::expect_contains(testing::error_message([&] { is_directory_at(over_path_max, "x"); }),
                           {"cannot look at x (File name too long)"});
}

}  // namespace
}  // namespace finetune
