// Where a run may write (output_directory.h): never the file system root, the base model's
// directory or anything inside it, nor the hub cache's folder of that model; compared as
// canonical paths, so a symlink, "." or ".." does not get around it.
#include <gtest/gtest.h>

#include <filesystem>

#include "../test_support.h"
#include "finetune/util/errors.h"
#include "finetune/util/output_directory.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// The UsageError message of `placement`, "" when it is accepted.
std::string refusal(const OutputPlacement& placement) {
  try {
    check_outputs_apart_from_model(placement);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

class OutputPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(model_);
    fs::create_directories(snapshot_);
  }
  OutputPlacement local(const std::string& output_dir, const std::string& save_path = "") const {
    return {output_dir, save_path, model_.string(), model_.string(), cache_.string()};
  }
  OutputPlacement hub(const std::string& output_dir, const std::string& save_path = "") const {
    return {output_dir, save_path, "org/tiny", snapshot_.string(), cache_.string()};
  }
  TempDir dir_{"placement"};
  fs::path model_ = dir_.path() / "base";
  fs::path cache_ = dir_.path() / "hf" / "hub";
  fs::path snapshot_ = cache_ / "models--org--tiny" / "snapshots" / "0123456789abcdef0123456789abcdef01234567";
};

TEST_F(OutputPlacementTest, SeparateDirectoriesAreAccepted) {
  EXPECT_EQ(refusal(local(dir_.file("out"), dir_.file("merged"))), "");
  EXPECT_EQ(refusal(hub(dir_.file("out"), dir_.file("merged"))), "");
  EXPECT_EQ(refusal(hub((cache_ / "elsewhere").string())), "");  // the cache, but not this model's folder
  EXPECT_EQ(refusal(local(dir_.str())), "");  // a parent of the model: the run's files go beside it
}

TEST_F(OutputPlacementTest, SavePathEqualToTheModelIsRefusedNamingBothOptions) {
  testing::expect_contains(refusal(local(dir_.file("out"), model_.string())),
                           {"--save_path " + model_.string(), "is the directory of --model_name " + model_.string(),
                            "overwrite", "choose another --save_path"});
  // spelled differently: a trailing slash, "..", a symlink
  EXPECT_NE(refusal(local(dir_.file("out"), model_.string() + "/")), "");
  EXPECT_NE(refusal(local(dir_.file("out"), (model_ / ".." / "base").string())), "");
  fs::create_directory_symlink(model_, dir_.path() / "link");
  EXPECT_NE(refusal(local(dir_.file("out"), dir_.file("link"))), "");
}

TEST_F(OutputPlacementTest, OutputDirEqualToOrInsideTheModelIsRefused) {
  testing::expect_contains(refusal(local(model_.string())),
                           {"--output_dir " + model_.string(), "is the directory of --model_name"});
  testing::expect_contains(refusal(local((model_ / "adapter").string())), {"lies inside the directory of"});
  testing::expect_contains(refusal(hub(snapshot_.string())), {"--output_dir", "--model_name org/tiny"});
  testing::expect_contains(refusal(hub(dir_.file("out"), (cache_ / "models--org--tiny" / "merged").string())),
                           {"--save_path", "the Hugging Face cache's folder of --model_name org/tiny"});
}

TEST_F(OutputPlacementTest, TheRootIsRefused) {
  testing::expect_contains(refusal(local("/")), {"--output_dir / is the file system root"});
  testing::expect_contains(refusal(local("/tmp/..")), {"is the file system root"});
  testing::expect_contains(refusal(local(dir_.file("out"), "//")), {"--save_path // is the file system root"});
}

}  // namespace
}  // namespace finetune
