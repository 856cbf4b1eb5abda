// Local Hugging Face cache resolution on fake cache trees built in a temp dir.
#include <gtest/gtest.h>

#include "../test_support.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include "finetune/config/hf_hub.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

class HfHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("hf_hub_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Creates `relative` under the temp root with `content`, returning its full path.
  std::string touch(const std::string& relative, const std::string& content = "{}") {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << content;
    return path.string();
  }
  std::string dir(const std::string& relative) {
    fs::create_directories(root_ / relative);
    return (root_ / relative).string();
  }
  std::string path(const std::string& relative) const { return (root_ / relative).string(); }

  fs::path root_;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_F(HfHubTest, LocalDirectoryWins) {
  const std::string local = dir("my_model");
  touch("hub/models--my_model/snapshots/abc/config.json");
  EXPECT_EQ(resolve_model_dir(local, {{"HF_HUB_CACHE", path("hub")}}), local);
}

TEST_F(HfHubTest, RefsMainPicksTheSnapshot) {
  touch("hub/models--Qwen--Qwen2.5-0.5B/snapshots/aaa/config.json");
  touch("hub/models--Qwen--Qwen2.5-0.5B/snapshots/bbb/config.json");
  touch("hub/models--Qwen--Qwen2.5-0.5B/refs/main", "bbb\n");
  EXPECT_EQ(resolve_model_dir("Qwen/Qwen2.5-0.5B", {{"HF_HUB_CACHE", path("hub")}}),
            path("hub/models--Qwen--Qwen2.5-0.5B/snapshots/bbb"));
}

TEST_F(HfHubTest, CacheRootPrecedence) {
  touch("a/models--org--m/snapshots/r1/config.json");
  touch("home_hf/hub/models--org--m/snapshots/r2/config.json");
  touch("user/.cache/huggingface/hub/models--org--m/snapshots/r3/config.json");
  const EnvMap all = {{"HF_HUB_CACHE", path("a")}, {"HF_HOME", path("home_hf")}, {"HOME", path("user")}};
  EXPECT_EQ(resolve_model_dir("org/m", all), path("a/models--org--m/snapshots/r1"));
  EXPECT_EQ(resolve_model_dir("org/m", {{"HF_HOME", path("home_hf")}, {"HOME", path("user")}}),
            path("home_hf/hub/models--org--m/snapshots/r2"));
  EXPECT_EQ(resolve_model_dir("org/m", {{"HOME", path("user")}}),
            path("user/.cache/huggingface/hub/models--org--m/snapshots/r3"));
}

TEST_F(HfHubTest, WithoutRefsTheNewestSnapshotIsUsed) {
  const std::string older = dir("hub/models--org--m/snapshots/old");
  const std::string newer = dir("hub/models--org--m/snapshots/new");
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(older, now - std::chrono::hours(2));
  fs::last_write_time(newer, now - std::chrono::hours(1));
  EXPECT_EQ(resolve_model_dir("org/m", {{"HF_HUB_CACHE", path("hub")}}), newer);
  fs::last_write_time(older, now);
  EXPECT_EQ(resolve_model_dir("org/m", {{"HF_HUB_CACHE", path("hub")}}), older);
}

TEST_F(HfHubTest, ModelNotFoundListsEveryPathTried) {
  const std::string msg = testing::error_message([&] { resolve_model_dir("org/missing", {{"HF_HUB_CACHE", path("hub")}}); });
  EXPECT_TRUE(contains(msg, "org/missing (local directory)")) << msg;
  EXPECT_TRUE(contains(msg, path("hub/models--org--missing/snapshots"))) << msg;
}

TEST_F(HfHubTest, RefsMainNamingAMissingSnapshot) {
  touch("hub/models--org--m/refs/main", "deadbeef");
  dir("hub/models--org--m/snapshots/other");
  const std::string msg = testing::error_message([&] { resolve_model_dir("org/m", {{"HF_HUB_CACHE", path("hub")}}); });
  EXPECT_TRUE(contains(msg, "deadbeef") && contains(msg, "refs/main")) << msg;
}

TEST_F(HfHubTest, NonHubLocalPathNotFound) {
  const std::string msg = testing::error_message([&] { resolve_model_dir(path("nope/a/b"), {{"HF_HUB_CACHE", path("hub")}}); });
  EXPECT_TRUE(contains(msg, path("nope/a/b"))) << msg;
  EXPECT_FALSE(contains(msg, "models--")) << msg;
}

TEST_F(HfHubTest, ModelPathThatIsAFile) {
  const std::string file = touch("config.json");
  EXPECT_TRUE(contains(testing::error_message([&] { resolve_model_dir(file, {}); }), file));
}

TEST_F(HfHubTest, NoCacheConfigured) {
  const std::string msg = testing::error_message([&] { resolve_model_dir("org/m", {}); });
  EXPECT_TRUE(contains(msg, "HF_HUB_CACHE")) << msg;
}

TEST_F(HfHubTest, DatasetLocalFile) {
  const std::string file = touch("data/train.jsonl");
  EXPECT_EQ(resolve_dataset_files(file, {}), std::vector<std::string>{file});
  const std::string csv = touch("data/train.csv");
  EXPECT_TRUE(contains(testing::error_message([&] { resolve_dataset_files(csv, {}); }), csv));
}

TEST_F(HfHubTest, DatasetLocalDirectoryIsCollectedSorted) {
  const std::string b = touch("data/b.jsonl");
  const std::string a = touch("data/sub/a.json");
  const std::string c = touch("data/c.json");
  touch("data/readme.md");
  touch("data/.hidden/x.json");
  EXPECT_EQ(resolve_dataset_files(path("data"), {}), (std::vector<std::string>{b, c, a}));
  dir("empty");
  EXPECT_TRUE(contains(testing::error_message([&] { resolve_dataset_files(path("empty"), {}); }), path("empty")));
}

TEST_F(HfHubTest, DatasetFromCacheFollowsSnapshotSymlinks) {
  const std::string blob = touch("hub/datasets--yahma--alpaca-cleaned/blobs/0123", "[]");
  const std::string snapshot = dir("hub/datasets--yahma--alpaca-cleaned/snapshots/rev1");
  touch("hub/datasets--yahma--alpaca-cleaned/refs/main", "rev1");
  fs::create_symlink(blob, snapshot + "/alpaca_data_cleaned.json");
  touch("hub/datasets--yahma--alpaca-cleaned/snapshots/rev1/data/part-00.jsonl");
  touch("hub/datasets--yahma--alpaca-cleaned/snapshots/rev1/dataset_infos.json");
  touch("hub/datasets--yahma--alpaca-cleaned/snapshots/rev1/README.md");
  EXPECT_EQ(resolve_dataset_files("yahma/alpaca-cleaned", {{"HF_HOME", path("")}, {"HF_HUB_CACHE", path("hub")}}),
            (std::vector<std::string>{snapshot + "/alpaca_data_cleaned.json", snapshot + "/data/part-00.jsonl"}));
}

TEST_F(HfHubTest, DatasetNotFoundListsEveryPathTried) {
  // A model repo of the same name is not a dataset.
  touch("hub/models--org--d/snapshots/r/x.json");
  const std::string msg = testing::error_message([&] { resolve_dataset_files("org/d", {{"HF_HUB_CACHE", path("hub")}}); });
  EXPECT_TRUE(contains(msg, "org/d (local file or directory)")) << msg;
  EXPECT_TRUE(contains(msg, path("hub/datasets--org--d/snapshots"))) << msg;

  touch("hub/datasets--org--e/snapshots/r/README.md");
  const std::string empty = testing::error_message([&] { resolve_dataset_files("org/e", {{"HF_HUB_CACHE", path("hub")}}); });
  EXPECT_TRUE(contains(empty, path("hub/datasets--org--e/snapshots/r"))) << empty;
}

}  // namespace
}  // namespace finetune
