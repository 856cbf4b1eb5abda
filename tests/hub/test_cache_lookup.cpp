// Local Hugging Face cache resolution on fake cache trees built in a temp dir.
#include <gtest/gtest.h>

#include "../test_support.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include "finetune/hub/cache_lookup.h"
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

// Commit ids as the hub writes them (refs hold nothing else).
const std::string kA(40, 'a');
const std::string kB(40, 'b');
const std::string kP(40, 'c');
const std::string kMissing = "deadbeef" + std::string(32, '0');

TEST_F(HfHubTest, LocalDirectoryWins) {
  const std::string local = dir("my_model");
  touch("hub/models--my_model/snapshots/abc/config.json");
  EXPECT_EQ(resolve_model_dir(local, {{"HF_HUB_CACHE", path("hub")}}), local);
}

TEST_F(HfHubTest, RefsMainPicksTheSnapshot) {
  touch("hub/models--Qwen--Qwen2.5-0.5B/snapshots/" + kA + "/config.json");
  touch("hub/models--Qwen--Qwen2.5-0.5B/snapshots/" + kB + "/config.json");
  touch("hub/models--Qwen--Qwen2.5-0.5B/refs/main", kB + "\n");
  EXPECT_EQ(resolve_model_dir("Qwen/Qwen2.5-0.5B", {{"HF_HUB_CACHE", path("hub")}}),
            path("hub/models--Qwen--Qwen2.5-0.5B/snapshots/" + kB));
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
  touch("hub/models--org--m/refs/main", kMissing);
  dir("hub/models--org--m/snapshots/other");
  const std::string msg = testing::error_message([&] { resolve_model_dir("org/m", {{"HF_HUB_CACHE", path("hub")}}); });
  EXPECT_TRUE(contains(msg, kMissing) && contains(msg, "refs/main")) << msg;
}

TEST_F(HfHubTest, ARefThatIsNotACommitIsRefusedNotFollowed) {
  // A ref's content becomes a path: "../../.." would leave the cache.
  dir("hub/models--org--m/snapshots/" + kA);
  touch("hub/models--org--m/refs/main", "../../../../outside\n");
  const std::string msg = testing::error_message([&] { resolve_model_dir("org/m", {{"HF_HUB_CACHE", path("hub")}}); });
  EXPECT_TRUE(contains(msg, path("hub/models--org--m/refs/main")) && contains(msg, "not a commit id")) << msg;
  EXPECT_TRUE(contains(testing::error_message([&] { cached_snapshot(path("hub/models--org--m"), "main"); }),
                       "not a commit id"));
}

TEST_F(HfHubTest, ARevisionThatLeavesRefsIsRefused) {
  touch("hub/models--org--m/snapshots/" + kA + "/config.json");
  touch("hub/models--org--secret", kA);
  for (const char* revision : {"../../models--org--secret", "/etc/passwd", "a/../../b"}) {
    const std::string msg =
        testing::error_message([&] { resolve_model_dir("org/m", {{"HF_HUB_CACHE", path("hub")}}, revision); });
    EXPECT_TRUE(contains(msg, std::string("revision '") + revision + "'")) << msg;
    EXPECT_TRUE(contains(testing::error_message([&] { cached_snapshot(path("hub/models--org--m"), revision); }),
                         "not a branch, tag or commit name"));
  }
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

TEST_F(HfHubTest, DatasetSnapshotsOfMainAndTheParquetBranch) {
  // huggingface_hub records revision "refs/convert/parquet" in refs/refs/convert/parquet.
  dir("hub/datasets--org--d/snapshots/" + kA);
  dir("hub/datasets--org--d/snapshots/" + kP);
  touch("hub/datasets--org--d/refs/main", kA);
  touch("hub/datasets--org--d/refs/refs/convert/parquet", kP + "\n");
  std::vector<std::string> tried;
  const auto found = find_dataset_snapshots("org/d", {{"HF_HUB_CACHE", path("hub")}}, tried);
  EXPECT_EQ(found.main, path("hub/datasets--org--d/snapshots/" + kA));
  EXPECT_EQ(found.parquet_export, path("hub/datasets--org--d/snapshots/" + kP));
}

TEST_F(HfHubTest, WithoutRefsMainTheParquetSnapshotIsNotTakenForMain) {
  const std::string parquet = dir("hub/datasets--org--d/snapshots/" + kP);
  touch("hub/datasets--org--d/refs/refs/convert/parquet", kP);
  std::vector<std::string> tried;
  auto found = find_dataset_snapshots("org/d", {{"HF_HUB_CACHE", path("hub")}}, tried);
  EXPECT_EQ(found.parquet_export, parquet);
  EXPECT_EQ(found.main, "");
  EXPECT_TRUE(contains(tried_lines(tried), path("hub/datasets--org--d/refs/main"))) << tried.size();

  const std::string copied = dir("hub/datasets--org--d/snapshots/copied");  // a cache filled without refs
  fs::last_write_time(parquet, fs::file_time_type::clock::now() + std::chrono::hours(1));
  tried.clear();
  found = find_dataset_snapshots("org/d", {{"HF_HUB_CACHE", path("hub")}}, tried);
  EXPECT_EQ(found.main, copied);
}

TEST_F(HfHubTest, DatasetNotInTheCache) {
  touch("hub/models--org--d/snapshots/r/x.json");  // a model repo of the same name is not a dataset
  std::vector<std::string> tried;
  const auto found = find_dataset_snapshots("org/d", {{"HF_HUB_CACHE", path("hub")}}, tried);
  EXPECT_EQ(found.main, "");
  EXPECT_EQ(found.parquet_export, "");
  EXPECT_TRUE(contains(tried_lines(tried), path("hub/datasets--org--d/snapshots"))) << tried_lines(tried);
  EXPECT_TRUE(contains(tried_lines(tried), "refs/refs/convert/parquet")) << tried_lines(tried);
}

TEST_F(HfHubTest, HubIdShape) {
  EXPECT_TRUE(looks_like_hub_id("yahma/alpaca-cleaned"));
  for (const char* not_id : {"alpaca", "a/b/c", "/abs/path", "./rel/x", "~/x", "org/", "/name"})
    EXPECT_FALSE(looks_like_hub_id(not_id)) << not_id;
}

}  // namespace
}  // namespace finetune
