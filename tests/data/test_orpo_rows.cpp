// ORPO rows against TRL 1.16: the chosen and rejected token ids and labels of every row form equal
// what ORPOTrainer's maybe_extract_prompt, maybe_apply_chat_template and tokenize_row produce, for
// real tokenizers and chat templates and several max_length (fixtures:
// tests/reference/make_preference_fixtures.py).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../reference/fixtures.h"
#include "finetune/data/orpo_rows.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

void expect_matches_trl(const std::string& family) {
  const std::string dir = reference::fixture_path("preference", family);
  const nlohmann::json expected = reference::load_json_fixture("preference", family + "/expected.json");
  const auto tokenizer = load_tokenizer(dir);
  const ChatTemplate chat_template = ChatTemplate::select("auto", tokenizer->special_tokens().chat_templates,
                                                         tokenizer->special_tokens(), ordered_json::object());
  std::vector<ordered_json> rows;
  std::ifstream in(dir + "/orpo_rows.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(ordered_json::parse(line));
  }
  ASSERT_FALSE(expected["orpo"].empty());
  int64_t cut = 0;
  for (const auto& setting : expected["orpo"]) {
    const int64_t max_length = setting["max_length"].get<int64_t>();
    ASSERT_EQ(rows.size(), setting["rows"].size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string where = family + " row " + std::to_string(i) + " max_length " + std::to_string(max_length);
      const nlohmann::json& want = setting["rows"][i];
      const PreferencePair pair = orpo_pair(rows[i], &chat_template, *tokenizer, max_length, static_cast<int64_t>(i));
      EXPECT_EQ(pair.group_id, static_cast<int64_t>(i));
      EXPECT_EQ(pair.chosen.input_ids, want["chosen_input_ids"].get<std::vector<int32_t>>()) << where;
      EXPECT_EQ(pair.chosen.labels, want["chosen_labels"].get<std::vector<int32_t>>()) << where;
      EXPECT_EQ(pair.rejected.input_ids, want["rejected_input_ids"].get<std::vector<int32_t>>()) << where;
      EXPECT_EQ(pair.rejected.labels, want["rejected_labels"].get<std::vector<int32_t>>()) << where;
      const nlohmann::json& untruncated = expected["orpo"][0]["rows"][i];
      cut += want["rejected_input_ids"].size() < untruncated["rejected_input_ids"].size();
    }
  }
  EXPECT_GT(cut, 0) << family << ": no setting truncates, so truncation went untested";
}

TEST(OrpoRows, Llama3ByteLevelBpeMatchesTrl) { expect_matches_trl("llama3"); }
TEST(OrpoRows, ChatMlNfcByteLevelBpeMatchesTrl) { expect_matches_trl("chatml"); }
TEST(OrpoRows, MistralSentencePieceMatchesTrl) { expect_matches_trl("mistral"); }

TEST(OrpoRows, PromptsEndingWithAnAssistantTurnAreRefused) {
  const std::string dir = reference::fixture_path("preference", "chatml");
  const auto tokenizer = load_tokenizer(dir);
  const ChatTemplate chat_template = ChatTemplate::select("auto", tokenizer->special_tokens().chat_templates,
                                                         tokenizer->special_tokens(), ordered_json::object());
  const ordered_json row = {{"prompt", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "He"}}}},
                            {"chosen", {{{"role", "assistant"}, {"content", "llo"}}}},
                            {"rejected", {{{"role", "assistant"}, {"content", "y"}}}}};
  EXPECT_THROW(orpo_pair(row, &chat_template, *tokenizer, 64, 0), Error);
  EXPECT_THROW(orpo_pair({{"prompt", "p"}, {"chosen", "a"}, {"rejected", "b"}}, nullptr, *tokenizer, 0, 0), UsageError);
}

}  // namespace
}  // namespace finetune
