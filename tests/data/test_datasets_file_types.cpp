// datasets' file-name tables, compared with the installed datasets (make_splits_fixtures.py), and
// its choice of builder for a list of files.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "../reference/fixtures.h"
#include "finetune/data/datasets_file_types.h"

namespace finetune {
namespace {

std::set<std::string> word_set(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> out;
  for (std::string word; in >> word;) out.insert(word);
  return out;
}

const nlohmann::json& tables() {
  static const nlohmann::json expected = reference::load_json_fixture("splits", "expected.json").at("tables");
  return expected;
}

TEST(DatasetsFileTypes, ExtensionTableIsDatasets) {
  std::map<std::string, std::set<std::string>> ours, theirs;
  for (const auto& [module, extensions] : datasets_extension_modules()) {
    EXPECT_TRUE(ours.emplace(module, word_set(extensions)).second) << "module listed twice: " << module;
  }
  for (const auto& [module, extensions] : tables().at("extension_modules").items()) {
    theirs[module] = std::set<std::string>(extensions.begin(), extensions.end());
  }
  EXPECT_EQ(ours, theirs);
}

TEST(DatasetsFileTypes, NameTablesAreDatasets) {
  EXPECT_EQ(datasets_ignored_file_names(), tables().at("files_to_ignore").get<std::vector<std::string>>());
  EXPECT_EQ(datasets_metadata_file_names(), tables().at("metadata_file_names").get<std::vector<std::string>>());
  std::map<std::string, std::set<std::string>> ours, theirs;
  for (const auto& [module, extensions] : datasets_metadata_extensions()) ours[module] = word_set(extensions);
  for (const auto& [module, extensions] : tables().at("metadata_extensions").items())
    theirs[module] = std::set<std::string>(extensions.begin(), extensions.end());
  EXPECT_EQ(ours, theirs);
}

TEST(DatasetsFileTypes, SplitKeywordsAreDatasets) {
  // data_file_splits.cpp spells these out; datasets' own lists must not have moved.
  const nlohmann::json expected = {{"train", {"train", "training"}},
                                   {"validation", {"validation", "valid", "dev", "val"}},
                                   {"test", {"test", "testing", "eval", "evaluation"}}};
  EXPECT_EQ(tables().at("split_keywords"), expected);
  EXPECT_EQ(tables().at("separators"), "-._ 0-9");
}

TEST(DatasetsFileTypes, BuilderIsTheMostCommonExtension) {
  EXPECT_EQ(datasets_builder_for({"a.jsonl", "b.jsonl", "c.parquet"}), "json");
  EXPECT_EQ(datasets_builder_for({"a.jsonl", "c.parquet"}), "parquet");  // a tie goes to .parquet
  EXPECT_EQ(datasets_builder_for({"a.json", "b.csv"}), "json");          // then .json before .csv
  EXPECT_EQ(datasets_builder_for({"a.txt", "b.xml"}), "xml");            // then the later name
  EXPECT_EQ(datasets_builder_for({"dir/train.jsonl.gz"}), "json");       // every suffix counts, .gz is unknown
  EXPECT_EQ(datasets_builder_for({"TRAIN.JSONL"}), "json");              // counted lower-cased
  EXPECT_EQ(datasets_builder_for({"a.zip", "b.zip", "c.json"}), "zip");
  EXPECT_EQ(datasets_builder_for({"notes.bak"}), "");
  EXPECT_EQ(datasets_builder_for({}), "");
  // Metadata files count last: a metadata.jsonl beside images does not make a JSON dataset.
  EXPECT_EQ(datasets_builder_for({"metadata.jsonl", "metadata.jsonl", "a.png"}), "imagefolder");
}

TEST(DatasetsFileTypes, DataExtensionsAreCaseSensitiveLikeDatasets) {
  EXPECT_TRUE(has_datasets_data_extension("x/train.jsonl"));
  EXPECT_TRUE(has_datasets_data_extension("train.jsonl.gz"));
  EXPECT_TRUE(has_datasets_data_extension("a.zip"));
  EXPECT_TRUE(has_datasets_data_extension("index.idx"));  // a lance metadata extension
  EXPECT_FALSE(has_datasets_data_extension("TRAIN.JSONL"));
  EXPECT_FALSE(has_datasets_data_extension("notes.bak"));
  EXPECT_FALSE(has_datasets_data_extension("Makefile"));
}

TEST(DatasetsFileTypes, BuilderFilterKeepsItsExtensionsAndCompressedForms) {
  EXPECT_TRUE(datasets_builder_keeps("json", "/d/train.jsonl"));
  EXPECT_TRUE(datasets_builder_keeps("json", "/d/train.json.gz"));
  EXPECT_TRUE(datasets_builder_keeps("json", "/d/archive.zip"));
  EXPECT_FALSE(datasets_builder_keeps("json", "/d/train.parquet"));
  EXPECT_FALSE(datasets_builder_keeps("json", "/d/train.json."));  // "." must be followed by more
  EXPECT_TRUE(datasets_builder_keeps("parquet", "/d/train-00000-of-00001.parquet"));
  EXPECT_TRUE(datasets_builder_keeps("text", "/d/a.txt"));
}

}  // namespace
}  // namespace finetune
