// Preference rows against TRL 1.16: the chosen and rejected token ids and labels of every row form
// (strings, message lists, implicit prompts) equal what DPOTrainer._prepare_dataset and
// DataCollatorForPreference produce, for real tokenizers and chat templates and several
// max_length / truncation_mode settings (fixtures: tests/reference/make_preference_fixtures.py).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../reference/fixtures.h"
#include "finetune/data/preference_rows.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

std::vector<ordered_json> read_rows(const std::string& path) {
  std::ifstream in(path);
  std::vector<ordered_json> rows;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(ordered_json::parse(line));
  }
  return rows;
}

PreferenceTruncation truncation_of(const nlohmann::json& setting) {
  PreferenceTruncation truncation;
  truncation.max_length = setting["max_length"].is_null() ? std::nullopt
                                                          : std::optional<int64_t>(setting["max_length"].get<int64_t>());
  truncation.mode = truncation_mode_from_name(setting["truncation_mode"].get<std::string>());
  return truncation;
}

void expect_matches_trl(const std::string& family) {
  const std::string dir = reference::fixture_path("preference", family);
  const nlohmann::json expected = reference::load_json_fixture("preference", family + "/expected.json");
  const auto tokenizer = load_tokenizer(dir);
  const ChatTemplate chat_template = ChatTemplate::select("auto", tokenizer->special_tokens().chat_templates,
                                                         tokenizer->special_tokens(), ordered_json::object());
  const std::vector<ordered_json> rows = read_rows(dir + "/rows.jsonl");
  ASSERT_EQ(rows.size(), expected["extracted"].size());

  std::vector<PreferenceTokens> tokens;
  for (size_t i = 0; i < rows.size(); ++i) {
    const PreferenceExample example = preference_example(rows[i]);
    const nlohmann::json& extracted = expected["extracted"][i];
    if (!extracted.is_null()) {
      EXPECT_EQ(nlohmann::json::parse(example.prompt.dump()), extracted["prompt"]) << family << " row " << i;
      EXPECT_EQ(nlohmann::json::parse(example.chosen.dump()), extracted["chosen"]) << family << " row " << i;
      EXPECT_EQ(nlohmann::json::parse(example.rejected.dump()), extracted["rejected"]) << family << " row " << i;
    }
    tokens.push_back(tokenize_preference(example, rows[i], &chat_template, *tokenizer));
  }

  int64_t dropped = 0, truncated = 0;
  for (const auto& setting : expected["truncations"]) {
    const PreferenceTruncation truncation = truncation_of(setting);
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string where = family + " row " + std::to_string(i) + " " + setting.dump();
      const nlohmann::json& want = setting["rows"][i];
      const auto pair = preference_pair(tokens[i], truncation, static_cast<int64_t>(i));
      if (want.is_null()) {
        EXPECT_FALSE(pair.has_value()) << where;
        ++dropped;
        continue;
      }
      ASSERT_TRUE(pair.has_value()) << where;
      EXPECT_EQ(pair->group_id, static_cast<int64_t>(i));
      EXPECT_EQ(pair->chosen.input_ids, want["chosen_input_ids"].get<std::vector<int32_t>>()) << where;
      EXPECT_EQ(pair->chosen.labels, want["chosen_labels"].get<std::vector<int32_t>>()) << where;
      EXPECT_EQ(pair->rejected.input_ids, want["rejected_input_ids"].get<std::vector<int32_t>>()) << where;
      EXPECT_EQ(pair->rejected.labels, want["rejected_labels"].get<std::vector<int32_t>>()) << where;
      if (truncation.max_length && tokens[i].prompt_ids.size() + tokens[i].rejected_ids.size() >
                                       static_cast<size_t>(*truncation.max_length)) {
        ++truncated;
      }
    }
  }
  // The settings exercise both dropping and truncation, or the comparison proves less than it says.
  EXPECT_GT(dropped, 0) << family;
  EXPECT_GT(truncated, 0) << family;
}

TEST(PreferenceRows, Llama3ByteLevelBpeMatchesTrl) { expect_matches_trl("llama3"); }
TEST(PreferenceRows, ChatMlNfcByteLevelBpeMatchesTrl) { expect_matches_trl("chatml"); }
TEST(PreferenceRows, MistralSentencePieceMatchesTrl) { expect_matches_trl("mistral"); }

TEST(PreferenceRows, ExtractPromptOfMessagesKeepsTheSharedTurns) {
  const ordered_json user = {{"role", "user"}, {"content", "Hi"}};
  const ordered_json chosen = ordered_json::array({user, {{"role", "assistant"}, {"content", "Hello"}}});
  const ordered_json rejected = ordered_json::array({user, {{"role", "assistant"}, {"content", "Go away"}}});
  const PreferenceExample example = extract_prompt(chosen, rejected);
  EXPECT_EQ(example.prompt, ordered_json::array({user}));
  EXPECT_EQ(example.chosen, ordered_json::array({chosen[1]}));
  EXPECT_EQ(example.rejected, ordered_json::array({rejected[1]}));
}

TEST(PreferenceRows, ExtractPromptFirstCharacterDifferentAfterTrailingSpaceWrapsAsPythonDoes) {
  // Python's chosen[idx - 1] at idx 0 reads the last character: a trailing space moves the cut to -1.
  const PreferenceExample example = extract_prompt("x ", "y");
  EXPECT_EQ(example.prompt, "x");
  EXPECT_EQ(example.chosen, " ");
  EXPECT_EQ(example.rejected, "y");
}

TEST(PreferenceRows, MixedFormsAndMissingFieldsAreErrorsNamingTheFields) {
  const ordered_json messages = ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_THROW(preference_example({{"prompt", "p"}, {"chosen", messages}, {"rejected", messages}}), Error);
  EXPECT_THROW(preference_example({{"chosen", "a"}}), Error);
  EXPECT_THROW(extract_prompt("", "b"), Error);
  try {
    preference_example({{"chosen", "a"}, {"rejected", messages}});
    FAIL() << "mixed chosen/rejected accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("\"chosen\""), std::string::npos) << error.what();
  }
  EXPECT_THROW(truncation_mode_from_name("keep_middle"), UsageError);
}

TEST(PreferenceRows, BatchRowsAreTheChosenThenTheRejectedInPairOrder) {
  std::vector<PreferencePair> pairs(3);
  for (int32_t i = 0; i < 3; ++i) {
    pairs[static_cast<size_t>(i)].chosen.input_ids = {10 + i};
    pairs[static_cast<size_t>(i)].rejected.input_ids = {20 + i};
    pairs[static_cast<size_t>(i)].group_id = i;
  }
  const std::vector<Sample> rows = preference_batch_rows(pairs, {2, 0});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].input_ids, std::vector<int32_t>{12});
  EXPECT_EQ(rows[1].input_ids, std::vector<int32_t>{10});
  EXPECT_EQ(rows[2].input_ids, std::vector<int32_t>{22});
  EXPECT_EQ(rows[3].input_ids, std::vector<int32_t>{20});
  EXPECT_THROW(preference_batch_rows(pairs, {3}), Error);
}

TEST(PreferenceRows, CompletionTokenCountIncludesTheFirstPosition) {
  Sample row;
  row.input_ids = {5, 6, 7};
  row.labels = {5, kIgnoreIndex, 7};
  EXPECT_EQ(completion_token_count(row), 2);
}

}  // namespace
}  // namespace finetune
