// Split inference against HF datasets itself: every directory layout that
// tests/reference/make_splits_fixtures.py builds must split into the same files, in the same
// order, with the same builder, and datasets' refusals must be refusals here. Plus the Parquet
// export's <config>/<split>/ layout and the split-name rule.
#include <gtest/gtest.h>

#include "../reference/fixtures.h"
#include "../test_support.h"
#include "finetune/data/data_file_splits.h"

namespace finetune {
namespace {

const nlohmann::json& expected() {
  static const nlohmann::json fixture = reference::load_json_fixture("splits", "expected.json");
  return fixture;
}

// Our answer in the fixture's form: [[split, [paths relative to dir]], ...].
nlohmann::json relative_splits(const DataFileSplits& splits, const std::string& dir) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, files] : splits.splits) {
    nlohmann::json relative = nlohmann::json::array();
    for (const auto& file : files) {
      EXPECT_EQ(file.rfind(dir + "/", 0), 0u) << file << " is not under " << dir;
      relative.push_back(file.substr(dir.size() + 1));
    }
    out.push_back({name, relative});
  }
  return out;
}

TEST(DataFileSplits, EveryLayoutSplitsAsDatasetsSplitsIt) {
  const auto& layouts = expected().at("layouts");
  ASSERT_GE(layouts.size(), 30u);
  for (const auto& [name, answer] : layouts.items()) {
    SCOPED_TRACE(name);
    const std::string dir = reference::fixture_path("splits", "layouts/" + name);
    if (answer.contains("error")) {
      const std::string message = testing::error_message([&] { infer_data_file_splits(dir); });
      EXPECT_NE(message.find(dir), std::string::npos) << "datasets: " << answer["error"] << "\nours: " << message;
      continue;
    }
    DataFileSplits ours;
    ASSERT_NO_THROW(ours = infer_data_file_splits(dir));
    EXPECT_EQ(ours.builder, answer.at("module").get<std::string>());
    EXPECT_EQ(relative_splits(ours, dir), answer.at("splits"));
    EXPECT_TRUE(ours.partial_splits.empty());
  }
}

TEST(DataFileSplits, HubSnapshotOfMainSplitsAsDatasetsSplitsIt) {
  const auto& plain = expected().at("hub").at("org/plain").at("main");
  const std::string snapshot = reference::fixture_path("splits", plain.at("snapshot").get<std::string>());
  const DataFileSplits ours = infer_data_file_splits(snapshot);  // through the cache's symlinks into blobs/
  EXPECT_EQ(ours.builder, plain.at("module").get<std::string>());
  EXPECT_EQ(relative_splits(ours, snapshot), plain.at("splits"));
}

TEST(DataFileSplits, ParquetExportFollowsTheViewersLayout) {
  for (const char* repo : {"org/parquet", "org/parquet_only"}) {
    SCOPED_TRACE(repo);
    const auto& branch = expected().at("hub").at(repo).at("refs/convert/parquet");
    const std::string snapshot = reference::fixture_path("splits", branch.at("snapshot").get<std::string>());
    const DataFileSplits ours = parquet_export_splits(snapshot);
    EXPECT_EQ(ours.builder, "parquet");
    EXPECT_EQ(relative_splits(ours, snapshot), branch.at("splits"));
    EXPECT_EQ(ours.partial_splits, branch.at("partial").get<std::vector<std::string>>());
  }
}

TEST(DataFileSplits, ParquetExportWithoutADefaultConfigNamesTheConfigs) {
  testing::TempDir dir("parquet_export");
  std::filesystem::create_directories(dir.path() / "en" / "train");
  std::filesystem::create_directories(dir.path() / "fr" / "train");
  dir.write("en/train/0000.parquet", "");
  dir.write("fr/train/0000.parquet", "");
  const std::string message = testing::error_message([&] { parquet_export_splits(dir.str()); });
  EXPECT_NE(message.find("en, fr"), std::string::npos) << message;
  // One config is the default whatever its name.
  std::filesystem::remove_all(dir.path() / "fr");
  EXPECT_EQ(parquet_export_splits(dir.str()).split_names(), std::vector<std::string>{"train"});
}

TEST(DataFileSplits, SplitNames) {
  for (const char* good : {"train", "validation", "test", "random", "split_1", "test.v2", "été"})
    EXPECT_TRUE(is_split_name(good)) << good;
  for (const char* bad : {"", "my-train", "train[:10%]", "train+test", ".a", "a.", "a..b", "a b"})
    EXPECT_FALSE(is_split_name(bad)) << bad;
}

TEST(DataFileSplits, LookupByName) {
  DataFileSplits splits;
  splits.splits = {{"train", {"a"}}, {"test", {"b", "c"}}};
  EXPECT_EQ(splits.split_names(), (std::vector<std::string>{"train", "test"}));
  ASSERT_NE(splits.files_of("test"), nullptr);
  EXPECT_EQ(splits.files_of("test")->size(), 2u);
  EXPECT_EQ(splits.files_of("validation"), nullptr);
}

}  // namespace
}  // namespace finetune
