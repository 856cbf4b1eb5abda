// --dataset / --dataset_split / --eval_dataset to files: files, directories and hub ids, the split
// chosen, --eval_dataset's precedence (an existing path, a hub id, a split of --dataset), and
// errors that name the option and list the splits there are.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "../reference/fixtures.h"
#include "../test_support.h"
#include "finetune/data/dataset_source.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;
using testing::expect_contains;

// Runs the test body in a fresh working directory (--eval_dataset's "existing path" is relative to
// it), restoring the old one after.
class DatasetSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = fs::current_path();
    fs::current_path(root_.path());
  }
  void TearDown() override { fs::current_path(previous_); }

  // Writes `names` (each one JSON row) under `dir`, returning the directory's path.
  std::string make_dir(const std::string& dir, const std::vector<std::string>& names) {
    for (const auto& name : names) {
      const fs::path path = root_.path() / dir / name;
      fs::create_directories(path.parent_path());
      std::ofstream(path) << "{\"text\": \"x\"}\n";
    }
    return (root_.path() / dir).string();
  }

  static EnvMap hub_env() { return {{"HF_HUB_CACHE", reference::fixture_path("splits", "hub")}}; }

  testing::TempDir root_{"dataset_source"};
  fs::path previous_;
};

std::string usage_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a UsageError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a UsageError";
  return "";
}

TEST_F(DatasetSourceTest, AFileIsItsOwnTrainSplit) {
  const std::string dir = make_dir("d", {"rows.jsonl"});
  const DatasetSplit split = resolve_dataset_split(dir + "/rows.jsonl", "train", {});
  EXPECT_EQ(split.files, std::vector<std::string>{dir + "/rows.jsonl"});
  EXPECT_EQ(split.splits_found, std::vector<std::string>{"train"});
  expect_contains(usage_error_of([&] { resolve_dataset_split(dir + "/rows.jsonl", "test", {}); }),
                  {"--dataset_split", "no split \"test\"", "its splits: train"});
}

TEST_F(DatasetSourceTest, FormatsFinetuneDoesNotReadAreNamed) {
  const std::string dir = make_dir("d", {"rows.csv", "csvs/train.csv", "csvs/test.csv"});
  expect_contains(testing::error_message([&] { resolve_dataset_split(dir + "/rows.csv", "train", {}); }),
                  {"--dataset", dir + "/rows.csv", "csv builder", "finetune takes the files of"});
  expect_contains(testing::error_message([&] { resolve_dataset_split(dir + "/csvs", "train", {}); }),
                  {dir + "/csvs", "csv builder"});
  make_dir("d", {"rows"});
  expect_contains(testing::error_message([&] { resolve_dataset_split(dir + "/rows", "train", {}); }),
                  {dir + "/rows", "no extension HF datasets knows"});
}

TEST_F(DatasetSourceTest, ADirectoryTrainsOnItsTrainSplitOnly) {
  const std::string dir = make_dir("d", {"train.jsonl", "test.jsonl"});
  const DatasetSplit split = resolve_dataset_split(dir, "train", {});
  EXPECT_EQ(split.files, std::vector<std::string>{dir + "/train.jsonl"});
  EXPECT_EQ(split.splits_found, (std::vector<std::string>{"train", "test"}));
  EXPECT_EQ(split.describe(), dir + ": split train (1 file; splits: train, test)");
  EXPECT_EQ(resolve_dataset_split(dir, "test", {}).files, std::vector<std::string>{dir + "/test.jsonl"});
}

TEST_F(DatasetSourceTest, AnUnknownSplitListsTheSplitsFound) {
  const std::string dir = make_dir("d", {"train.jsonl", "test.jsonl"});
  expect_contains(usage_error_of([&] { resolve_dataset_split(dir, "validation", {}); }),
                  {"--dataset_split", dir, "no split \"validation\"", "its splits: train, test"});
  // A directory with nothing that names a split is all "train", as datasets has it.
  const std::string plain = make_dir("plain", {"a.jsonl", "b.jsonl"});
  EXPECT_EQ(resolve_dataset_split(plain, "train", {}).files.size(), 2u);
  expect_contains(usage_error_of([&] { resolve_dataset_split(plain, "test", {}); }), {"its splits: train"});
}

TEST_F(DatasetSourceTest, EvalDatasetNamesASplitOfTheDataset) {
  const std::string dir = make_dir("d", {"train.jsonl", "validation.jsonl", "test.jsonl"});
  EXPECT_EQ(resolve_eval_dataset("test", dir, "train", {}).files, std::vector<std::string>{dir + "/test.jsonl"});
  const DatasetSplit validation = resolve_eval_dataset("validation", dir, "train", {});
  EXPECT_EQ(validation.split, "validation");
  EXPECT_EQ(validation.files, std::vector<std::string>{dir + "/validation.jsonl"});
  expect_contains(usage_error_of([&] { resolve_eval_dataset("dev_set", dir, "train", {}); }),
                  {"--eval_dataset dev_set", "no such file or directory", "its splits: train, validation, test"});
}

TEST_F(DatasetSourceTest, AnExistingPathWinsOverASplitName) {
  const std::string dataset = make_dir("d", {"train.jsonl", "test.jsonl"});
  make_dir("test", {"mine.jsonl"});  // ./test in the working directory
  const DatasetSplit split = resolve_eval_dataset("test", dataset, "train", {});
  EXPECT_EQ(split.files, std::vector<std::string>{"test/mine.jsonl"});
}

TEST_F(DatasetSourceTest, AnEvalDirectoryIsReadAtItsValidationElseTestElseOnlySplit) {
  EXPECT_EQ(resolve_eval_dataset(make_dir("e1", {"train.jsonl", "validation.jsonl", "test.jsonl"}), "", "train", {}).split,
            "validation");
  EXPECT_EQ(resolve_eval_dataset(make_dir("e2", {"train.jsonl", "test.jsonl"}), "", "train", {}).split, "test");
  EXPECT_EQ(resolve_eval_dataset(make_dir("e3", {"rows.jsonl"}), "", "train", {}).split, "train");
  const std::string file = make_dir("e4", {"eval.jsonl"}) + "/eval.jsonl";
  EXPECT_EQ(resolve_eval_dataset(file, "", "train", {}).files, std::vector<std::string>{file});
  const std::string ambiguous = make_dir("e5", {"data/train-00000-of-00001.jsonl", "data/extra-00000-of-00001.jsonl"});
  expect_contains(usage_error_of([&] { resolve_eval_dataset(ambiguous, "", "train", {}); }),
                  {"--eval_dataset", "train, extra", "none of them validation or test"});
}

TEST_F(DatasetSourceTest, NotFoundSaysWhereFinetuneLooked) {
  const std::string missing = testing::error_message([&] { resolve_dataset_split("org/absent", "train", hub_env()); });
  expect_contains(missing, {"--dataset org/absent not found", "org/absent (local file or directory)",
                            "datasets--org--absent/snapshots"});
  expect_contains(testing::error_message([&] { resolve_eval_dataset("org/absent", "", "train", hub_env()); }),
                  {"--eval_dataset org/absent not found", "datasets--org--absent"});
  // Not a split name nor a path nor a hub id.
  expect_contains(testing::error_message([&] { resolve_eval_dataset("no such/file.jsonl/x", "", "train", {}); }),
                  {"--eval_dataset no such/file.jsonl/x not found"});
}

TEST_F(DatasetSourceTest, HubDatasetFromRefsMain) {
  const DatasetSplit split = resolve_dataset_split("org/plain", "train", hub_env());
  ASSERT_EQ(split.files.size(), 1u);
  EXPECT_NE(split.files[0].find("datasets--org--plain/snapshots/"), std::string::npos) << split.files[0];
  EXPECT_NE(split.files[0].find("data/train-00000-of-00001.jsonl"), std::string::npos) << split.files[0];
  EXPECT_EQ(split.splits_found, (std::vector<std::string>{"train", "test"}));
  EXPECT_EQ(resolve_eval_dataset("org/plain", "", "train", hub_env()).split, "test");
}

TEST_F(DatasetSourceTest, HubDatasetFromTheParquetExportWhenMainHasNoDataFiles) {
  const DatasetSplit train = resolve_dataset_split("org/parquet", "train", hub_env());
  EXPECT_EQ(train.files.size(), 2u);
  EXPECT_NE(train.location.find("Parquet export"), std::string::npos) << train.location;
  EXPECT_EQ(train.splits_found, (std::vector<std::string>{"train", "validation", "test"}));
  EXPECT_FALSE(train.partial);
  const DatasetSplit validation = resolve_eval_dataset("org/parquet", "", "train", hub_env());
  EXPECT_EQ(validation.split, "validation");
  EXPECT_TRUE(validation.partial);
  EXPECT_NE(validation.describe().find("partial Parquet export"), std::string::npos);
  // Only the Parquet branch in the cache, two configs: the default one.
  const DatasetSplit only = resolve_dataset_split("org/parquet_only", "train", hub_env());
  ASSERT_EQ(only.files.size(), 1u);
  EXPECT_NE(only.files[0].find("/default/train/0000.parquet"), std::string::npos) << only.files[0];
  // A split name after a hub id: "test" of the Parquet export.
  EXPECT_EQ(resolve_eval_dataset("test", "org/parquet", "train", hub_env()).files.size(), 1u);
}

}  // namespace
}  // namespace finetune
