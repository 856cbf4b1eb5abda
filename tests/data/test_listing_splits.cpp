// Split inference over a hub repo's listing, before anything is downloaded (infer_listing_splits,
// parquet_export_listing_splits). The expected splits are what datasets 5.2's
// load_dataset_builder(DIR) made of the same files laid out in a directory; each listing is also
// laid out in a temp directory here, where infer_data_file_splits (parquet_export_splits) must
// give the same splits, as absolute paths.
#include <gtest/gtest.h>

#include <pthread.h>

#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../test_support.h"
#include "finetune/data/data_file_splits.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

using Files = std::vector<std::string>;
using Splits = std::vector<std::pair<std::string, Files>>;

// The listing's files, empty, under a fresh directory.
void lay_out(const testing::TempDir& dir, const Files& listing) {
  for (const auto& path : listing) {
    fs::create_directories((dir.path() / path).parent_path());
    dir.write(path, "");
  }
}

// `splits` with `dir` + "/" in front of every file.
Splits under(const std::string& dir, Splits splits) {
  for (auto& [split, files] : splits)
    for (auto& file : files) file = dir + "/" + file;
  return splits;
}

// The listing's answer is `builder` and `splits`; the directory laid out from it gives the same.
void expect_listing_splits(const Files& listing, const std::string& builder, const Splits& splits) {
  const DataFileSplits from_listing = infer_listing_splits("dataset org/ds", listing);
  EXPECT_EQ(from_listing.builder, builder);
  EXPECT_EQ(from_listing.splits, splits);
  EXPECT_TRUE(from_listing.partial_splits.empty());

  testing::TempDir dir("listing_splits");
  lay_out(dir, listing);
  const DataFileSplits from_directory = infer_data_file_splits(dir.str());
  EXPECT_EQ(from_directory.builder, builder);
  EXPECT_EQ(from_directory.splits, under(dir.str(), splits));
}

TEST(ListingSplits, ShardsNameTheirSplits) {
  expect_listing_splits({"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
                         "data/test-00000-of-00001.parquet", "data/validation-00000-of-00001.parquet", "README.md",
                         ".gitattributes"},
                        "parquet",
                        {{"train", {"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"}},
                         {"validation", {"data/validation-00000-of-00001.parquet"}},
                         {"test", {"data/test-00000-of-00001.parquet"}}});
}

TEST(ListingSplits, ShardsOfACustomSplitAndTheBuildersFilesOnly) {
  // The .csv shard is a train file by its name, but the builder is json (two .jsonl, one .csv).
  expect_listing_splits({"data/train-00000-of-00001.jsonl", "data/my_split.v2-00000-of-00001.jsonl",
                         "data/train-00000-of-00001.csv"},
                        "json",
                        {{"train", {"data/train-00000-of-00001.jsonl"}},
                         {"my_split.v2", {"data/my_split.v2-00000-of-00001.jsonl"}}});
}

TEST(ListingSplits, KeywordFileNames) {
  expect_listing_splits({"train.jsonl", "test.jsonl", "README.md", ".hidden/train_extra.jsonl",
                         "__pycache__/test_x.jsonl", ".gitattributes", "data/.cache/test.jsonl"},
                        "json", {{"train", {"train.jsonl"}}, {"test", {"test.jsonl"}}});
}

TEST(ListingSplits, KeywordsAreWholeWordsAndCaseSensitive) {
  // trainer.jsonl and Test.jsonl match no keyword: with keyword files present, they are no split's.
  expect_listing_splits({"my_data-dev.json", "train_0.jsonl", "train_1.jsonl", "trainer.jsonl", "Test.jsonl",
                         "eval.json"},
                        "json",
                        {{"train", {"train_0.jsonl", "train_1.jsonl"}},
                         {"validation", {"my_data-dev.json"}},
                         {"test", {"eval.json"}}});
}

TEST(ListingSplits, KeywordDirectories) {
  expect_listing_splits({"train/a.json", "validation/b.json", "test/c.json", "dataset_info.json"}, "json",
                        {{"train", {"train/a.json"}}, {"validation", {"validation/b.json"}}, {"test", {"test/c.json"}}});
}

TEST(ListingSplits, CsvOnlyIsAllTrain) {
  expect_listing_splits({"b.csv", "a.csv", "README.md"}, "csv", {{"train", {"a.csv", "b.csv"}}});
}

TEST(ListingSplits, MostCommonFormatWins) {
  expect_listing_splits({"b.jsonl", "a.jsonl", "c.parquet", "sub/d.jsonl"}, "json",
                        {{"train", {"a.jsonl", "b.jsonl", "sub/d.jsonl"}}});
}

TEST(ListingSplits, NoDataFilesNamesTheListing) {
  testing::expect_contains(
      testing::error_message([] { infer_listing_splits("dataset org/empty", {"README.md", ".gitattributes"}); }),
      {"dataset org/empty", "no data files"});
  testing::expect_contains(testing::error_message([] { infer_listing_splits("dataset org/none", {}); }),
                           {"dataset org/none", "no data files"});
}

TEST(ListingSplits, DifferentFormatsPerSplitAreRefused) {
  // datasets: "Couldn't infer the same data file format for all splits"
  testing::expect_contains(
      testing::error_message([] { infer_listing_splits("dataset org/mixed", {"train.jsonl", "test.csv"}); }),
      {"dataset org/mixed", "train: json", "test: csv"});
}

TEST(ListingSplits, BadShardSplitNameIsRefused) {
  testing::expect_contains(testing::error_message([] {
                             infer_listing_splits("dataset org/bad", {"data/my-split-00000-of-00001.parquet"});
                           }),
                           {"dataset org/bad", "data/my-split-00000-of-00001.parquet", "\"my-split\""});
}

// The Parquet branch's listing, and the same files laid out as a snapshot.
DataFileSplits expect_same_export(const Files& listing) {
  const DataFileSplits from_listing = parquet_export_listing_splits("dataset org/ds@refs/convert/parquet", listing);
  testing::TempDir dir("parquet_listing");
  lay_out(dir, listing);
  const DataFileSplits from_directory = parquet_export_splits(dir.str());
  EXPECT_EQ(from_directory.builder, from_listing.builder);
  EXPECT_EQ(from_directory.splits, under(dir.str(), from_listing.splits));
  EXPECT_EQ(from_directory.partial_splits, from_listing.partial_splits);
  return from_listing;
}

TEST(ListingSplits, ParquetExportWithAPartialSplit) {
  const DataFileSplits splits =
      expect_same_export({"default/partial-test/0000.parquet", "default/train/0001.parquet",
                          "default/train/0000.parquet", ".gitattributes", "README.md", "default/train/notes.txt",
                          "default/train/deeper/0002.parquet", ".hidden/train/0000.parquet",
                          "default/.cache/0000.parquet"});
  EXPECT_EQ(splits.builder, "parquet");
  EXPECT_EQ(splits.splits, (Splits{{"train", {"default/train/0000.parquet", "default/train/0001.parquet"}},
                                   {"test", {"default/partial-test/0000.parquet"}}}));
  EXPECT_EQ(splits.partial_splits, Files{"test"});
}

TEST(ListingSplits, ParquetExportSplitOrder) {
  const DataFileSplits splits = expect_same_export(
      {"plain_text/zeta/0000.parquet", "plain_text/test/0000.parquet", "plain_text/alpha/0000.parquet",
       "plain_text/validation/0000.parquet", "plain_text/train/0000.parquet",
       ".cache/train/0000.parquet"});  // a hidden directory is no second config
  EXPECT_EQ(splits.split_names(), (Files{"train", "validation", "test", "alpha", "zeta"}));
  EXPECT_EQ(*splits.files_of("alpha"), Files{"plain_text/alpha/0000.parquet"});  // the only config, whatever its name
  EXPECT_TRUE(splits.partial_splits.empty());
}

TEST(ListingSplits, ParquetExportPicksTheDefaultConfig) {
  const DataFileSplits splits = expect_same_export({"en/train/0000.parquet", "default/train/0000.parquet"});
  EXPECT_EQ(splits.splits, (Splits{{"train", {"default/train/0000.parquet"}}}));
}

TEST(ListingSplits, ParquetExportWithoutADefaultConfigIsAnError) {
  const std::string message = testing::error_message([] {
    parquet_export_listing_splits("dataset org/multi@refs/convert/parquet",
                                  {"fr/train/0000.parquet", "en/train/0000.parquet", "en/test/0000.parquet"});
  });
  testing::expect_contains(message, {"dataset org/multi@refs/convert/parquet", "en, fr", "default"});
}

TEST(ListingSplits, ParquetExportWithoutParquetFilesIsAnError) {
  for (const Files& listing : {Files{}, Files{".gitattributes", "README.md"}, Files{"default/train/0000.json"}}) {
    SCOPED_TRACE(listing.size());
    const std::string message =
        testing::error_message([&] { parquet_export_listing_splits("dataset org/nothing", listing); });
    testing::expect_contains(message, {"dataset org/nothing", "no <config>/<split>/NNNN.parquet files"});
    EXPECT_EQ(message.find("none named default"), std::string::npos) << message;
  }
}

// Runs `action` on a thread with a `stack_bytes` stack and rethrows what it threw: a matcher that
// recursed per character (std::regex did) overflows 256 KB on a name of a few thousand bytes.
void run_on_small_stack(size_t stack_bytes, const std::function<void()>& action) {
  struct Call {
    const std::function<void()>* action;
    std::exception_ptr thrown;
  } call{&action, nullptr};
  pthread_attr_t attributes;
  ASSERT_EQ(pthread_attr_init(&attributes), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attributes, stack_bytes), 0);
  pthread_t thread;
  const auto body = [](void* argument) -> void* {
    auto* call = static_cast<Call*>(argument);
    try {
      (*call->action)();
    } catch (...) {
      call->thrown = std::current_exception();
    }
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attributes, body, &call), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attributes);
  if (call.thrown) std::rethrow_exception(call.thrown);
}

TEST(ListingSplits, MegabyteNamesOnASmallStackGiveDatasetsAnswer) {
  constexpr size_t kStack = 256 * 1024;
  const std::string long_name(size_t{1} << 20, 'x');
  std::string deep_directories;
  for (size_t i = 0; i < (size_t{1} << 19); ++i) deep_directories += "d/";
  const std::string shard = "data/" + long_name + "-00000-of-00001.parquet";
  const std::string keyword_file = long_name + "_train.jsonl";
  const std::string deep_file = deep_directories + "validation/rows.jsonl";
  const std::string bad_shard = "data/" + long_name + "-y-00000-of-00001.parquet";
  DataFileSplits shards, keywords, directories;
  std::string refusal;
  run_on_small_stack(kStack, [&] {
    shards = infer_listing_splits("dataset org/long", {shard, "README.md"});
    keywords = infer_listing_splits("dataset org/long", {"test.jsonl", keyword_file});
    directories = infer_listing_splits("dataset org/deep", {"train.jsonl", deep_file});
    refusal = testing::error_message([&] { infer_listing_splits("dataset org/bad", {bad_shard}); });
  });
  EXPECT_EQ(shards.builder, "parquet");
  EXPECT_EQ(shards.splits, (Splits{{long_name, {shard}}}));
  EXPECT_EQ(keywords.builder, "json");
  EXPECT_EQ(keywords.splits, (Splits{{"train", {keyword_file}}, {"test", {"test.jsonl"}}}));
  // A keyword directory decides the splits before any keyword file name: train.jsonl is no split's.
  EXPECT_EQ(directories.builder, "json");
  EXPECT_EQ(directories.splits, (Splits{{"validation", {deep_file}}}));
  testing::expect_contains(refusal, {"dataset org/bad", "\"" + long_name + "-y\"", "which HF datasets refuses"});
}

}  // namespace
}  // namespace finetune
