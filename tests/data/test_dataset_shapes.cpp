// Every dataset shape against its reference (fixtures: tests/reference/make_dataset_shapes_fixtures.py):
// raw text chunks = unsloth's RawTextDataLoader, .json layouts = the rows HF datasets reads,
// text / alpaca / prompt-completion rows = TRL's tokenization; plus dataset weights and the
// report of rows dropped by truncation.
#include <gtest/gtest.h>

#include <map>

#include "../reference/fixtures.h"
#include "../test_support.h"
#include "byte_tokenizer.h"
#include "finetune/data/dataset.h"
#include "finetune/data/dataset_files.h"
#include "finetune/data/dataset_mixture.h"
#include "finetune/data/raw_text.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {
namespace {

using nlohmann::json;

std::string shapes_file(const std::string& name) { return reference::fixture_path("dataset_shapes", name); }

class DatasetShapes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    expected_ = new json(reference::load_json_fixture("dataset_shapes", "expected.json"));
    tokenizer_ = load_tokenizer(shapes_file("tokenizer")).release();
  }
  static void TearDownTestSuite() {
    delete expected_;
    delete tokenizer_;
  }
  static json* expected_;
  static Tokenizer* tokenizer_;
};
json* DatasetShapes::expected_ = nullptr;
Tokenizer* DatasetShapes::tokenizer_ = nullptr;

TEST_F(DatasetShapes, RawTextChunksMatchUnsloth) {
  const auto& cases = expected_->at("raw");
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.at("file").get<std::string>() + " chunk_size " + c.at("chunk_size").dump() + " stride " +
                 c.at("stride").dump());
    RawTextOptions options{c.at("chunk_size").get<int64_t>(), c.at("stride").get<int64_t>()};
    const auto chunks = chunk_raw_text(read_raw_text(shapes_file(c.at("file"))), *tokenizer_, options);
    const auto expected = c.at("chunks").get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(chunks.size(), expected.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].input_ids, expected[i]) << "chunk " << i;
      EXPECT_EQ(chunks[i].labels, expected[i]);
    }
  }
}

TEST_F(DatasetShapes, RawTextErrors) {
  testing::TempDir dir("raw_text");
  dir.write("blank.txt", " \n\t\n");
  testing::expect_contains(testing::error_message([&] { read_raw_text(dir.file("blank.txt")); }),
                           {"blank.txt: raw text file is empty"});
  dir.write("data.csv", "text\nhello\n");
  testing::expect_contains(testing::error_message([&] { read_raw_text(dir.file("data.csv")); }), {"data.csv: CSV"});
  testing::expect_contains(testing::error_message([&] { read_raw_text(dir.file("missing.txt")); }),
                           {"missing.txt: cannot open"});
  EXPECT_THROW(chunk_raw_text("abc", *tokenizer_, {4, 4}), UsageError);
  EXPECT_THROW(chunk_raw_text("abc", *tokenizer_, {4, -1}), UsageError);
  EXPECT_THROW(chunk_raw_text("abc", *tokenizer_, {0, 0}), UsageError);
}

TEST_F(DatasetShapes, JsonLayoutsReadLikeHfDatasets) {
  for (const auto& c : expected_->at("layouts")) {
    SCOPED_TRACE(c.at("file").get<std::string>());
    std::vector<json> rows;
    for_each_dataset_row(shapes_file(c.at("file")), [&](const DatasetRow& row) {
      EXPECT_TRUE(row.parse_error.empty()) << row.parse_error;
      rows.push_back(json::parse(row.value.dump()));
    });
    EXPECT_EQ(json(rows), c.at("rows"));
  }
}

TEST_F(DatasetShapes, TextAlpacaAndPromptCompletionRowsMatchTrl) {
  int checked = 0;
  for (const auto& c : expected_->at("rows")) {
    SCOPED_TRACE(c.at("file").get<std::string>());
    const TokenizedDataset data = load_dataset({shapes_file(c.at("file"))}, tokenizer_, {});
    const auto& samples = c.at("samples");
    ASSERT_EQ(data.samples.size(), samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      EXPECT_EQ(data.samples[i].input_ids, samples[i].at("input_ids").get<std::vector<int32_t>>()) << "row " << i;
      EXPECT_EQ(data.samples[i].labels, samples[i].at("labels").get<std::vector<int32_t>>()) << "row " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 9);
}

Sample numbered(int32_t id) { return Sample{{id, id}, {id, id}}; }

TokenizedDataset dataset_of(int32_t first, int count) {
  TokenizedDataset dataset;
  for (int i = 0; i < count; ++i) dataset.samples.push_back(numbered(first + i));
  dataset.stats.rows_read = count;
  return dataset;
}

TEST(DatasetMixture, WeightsRepeatAndSubsample) {
  const auto mixed = mix_datasets({dataset_of(0, 10), dataset_of(100, 4), dataset_of(200, 3)}, {0.5, 2.0, 0.0}, 7);
  std::map<int32_t, int> counts;
  for (const Sample& s : mixed.samples) ++counts[s.input_ids[0]];
  int from_first = 0;
  for (const auto& [id, count] : counts) {
    if (id < 100) {
      EXPECT_EQ(count, 1) << "sampled without replacement";
      ++from_first;
    } else {
      EXPECT_LT(id, 200) << "weight 0 leaves a dataset out";
      EXPECT_EQ(count, 2);
    }
  }
  EXPECT_EQ(from_first, 5);
  EXPECT_EQ(mixed.samples.size(), 5u + 8u);
  EXPECT_EQ(mixed.stats.rows_read, 17);
  EXPECT_EQ(mixed.stats.rows_kept, 13);
  // The seed decides which half, and the same seed the same half.
  const auto again = mix_datasets({dataset_of(0, 10), dataset_of(100, 4), dataset_of(200, 3)}, {0.5, 2.0, 0.0}, 7);
  const auto other = mix_datasets({dataset_of(0, 10), dataset_of(100, 4), dataset_of(200, 3)}, {0.5, 2.0, 0.0}, 8);
  auto first_ids = [](const TokenizedDataset& d) {
    std::vector<int32_t> ids;
    for (const Sample& s : d.samples) ids.push_back(s.input_ids[0]);
    return ids;
  };
  EXPECT_EQ(first_ids(mixed), first_ids(again));
  EXPECT_NE(first_ids(mixed), first_ids(other));
  EXPECT_THROW(mix_datasets({dataset_of(0, 2)}, {1.0, 1.0}, 0), UsageError);
  EXPECT_THROW(mix_datasets({dataset_of(0, 2)}, {-1.0}, 0), UsageError);
}

TEST(DroppedRows, TruncationLossesAreReportedWithTheLengthThatKeepsThem) {
  TokenizedDataset dataset;
  auto row = [](int prompt, int answer) {
    Sample s;
    for (int i = 0; i < prompt; ++i) s.input_ids.push_back(1), s.labels.push_back(kIgnoreIndex);
    for (int i = 0; i < answer; ++i) s.input_ids.push_back(2), s.labels.push_back(2);
    return s;
  };
  add_sample(dataset, row(5, 3), 16);   // kept
  add_sample(dataset, row(20, 3), 16);  // prompt 20: truncated away
  add_sample(dataset, row(31, 1), 16);  // prompt 31: truncated away
  add_sample(dataset, row(4, 0), 16);   // nothing to train on at all
  EXPECT_EQ(dataset.samples.size(), 1u);
  EXPECT_EQ(dataset.stats.rows_truncated, 2);
  EXPECT_EQ(dataset.stats.rows_truncated_away, 2);
  EXPECT_EQ(dataset.stats.longest_dropped_prompt, 31);
  EXPECT_EQ(describe_dropped_rows(dataset.stats),
            "2 rows lost every trainable token to truncation (longest prompt 31 tokens; --max_seq_length 32 would "
            "keep them); 1 rows had no trainable token at all (no assistant turn or completion)");
  add_sample(dataset, row(31, 1), 32);
  EXPECT_EQ(dataset.samples.size(), 2u) << "32 keeps the longest";
}

}  // namespace
}  // namespace finetune
