// Which inputs are hub ids to fetch, and a --model_name written as a path that does not exist.
#include <gtest/gtest.h>

#include <filesystem>

#include "../test_support.h"
#include "finetune/commands/hub_inputs.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

// Runs the test body in a fresh directory holding models/ (relative paths are the point here).
class InTempDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = fs::current_path();
    fs::create_directories(dir_.path() / "models");
    fs::current_path(dir_.path());
  }
  void TearDown() override { fs::current_path(previous_); }
  testing::TempDir dir_{"hub_inputs"};
  fs::path previous_;
};

TEST_F(InTempDirectory, PathLikeModelNames) {
  for (const char* path : {"/abs/model", "./model", "../model", "~/model", "a/b/c", "models/qwen4", "."}) {
    EXPECT_TRUE(is_path_like(path)) << path;
  }
  for (const char* id : {"Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B", "gpt2"}) EXPECT_FALSE(is_path_like(id)) << id;
}

TEST_F(InTempDirectory, AMissingLocalPathIsNotAHubRequest) {
  try {
    check_local_model_path("models/qwen4");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--model_name: local directory models/qwen4 not found"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_local_model_path("./nowhere"), Error);
  fs::create_directories("models/qwen3");
  EXPECT_NO_THROW(check_local_model_path("models/qwen3"));
  EXPECT_NO_THROW(check_local_model_path("Qwen/Qwen3-0.6B"));  // a hub id: fetched, or reported by the hub stage
  // Only a hub id is fetched.
  EXPECT_TRUE(hub_inputs_from(ModelSource{"models/qwen4"}, DataSetup{}, true).model.empty());
  EXPECT_EQ(hub_inputs_from(ModelSource{"Qwen/Qwen3-0.6B"}, DataSetup{}, true).model, "Qwen/Qwen3-0.6B");
}

}  // namespace
}  // namespace finetune
