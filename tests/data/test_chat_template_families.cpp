// Real chat templates of 24 model families (fixtures: tests/reference/make_chat_templates_fixtures.py)
// run by our Jinja engine on tiny tokenizers with each family's special tokens: the rendered text
// and token ids equal transformers' apply_chat_template, raised errors are raised, and the loss
// masks equal TRL's (generation markers: SFTTrainer with assistant_only_loss; prompt/completion:
// completion_only_loss) or the per-turn prefix difference (chat_masks.prefix_token_mask).
#include <gtest/gtest.h>

#include <fstream>

#include "../reference/fixtures.h"
#include "finetune/data/chat_template.h"
#include "finetune/data/chat_tokenization.h"
#include "finetune/data/dataset_formats.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::vector<ordered_json> read_rows(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<ordered_json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(parse_ordered_json(line, path));
  }
  return rows;
}

std::vector<int32_t> mask_of(const Sample& sample) {
  std::vector<int32_t> mask;
  for (const int32_t label : sample.labels) mask.push_back(label == kIgnoreIndex ? 0 : 1);
  return mask;
}

// Where two masks first differ, with the token ids around it, for failure messages.
std::string first_difference(const std::vector<int32_t>& ours, const std::vector<int32_t>& theirs,
                             const std::vector<int32_t>& ids) {
  for (size_t i = 0; i < std::max(ours.size(), theirs.size()); ++i) {
    const int ours_i = i < ours.size() ? ours[i] : -1;
    const int theirs_i = i < theirs.size() ? theirs[i] : -1;
    if (ours_i != theirs_i) {
      return "first difference at token " + std::to_string(i) + " (id " + (i < ids.size() ? std::to_string(ids[i]) : "-") +
             "): ours " + std::to_string(ours_i) + ", reference " + std::to_string(theirs_i);
    }
  }
  return "";
}

struct FamilyCounts {
  int rendered = 0, raised = 0, masks = 0, completions = 0;
};

FamilyCounts check_family(const std::string& family) {
  SCOPED_TRACE(family);
  FamilyCounts counts;
  const std::string dir = reference::fixture_path("chat_templates", family);
  const json expected = reference::load_json_fixture("chat_templates", family + "/expected.json");
  const auto tokenizer = load_tokenizer(dir);
  const SpecialTokens& special = tokenizer->special_tokens();
  const ChatTemplate chat_template = ChatTemplate::select("auto", special.chat_templates, special, ordered_json::object());
  EXPECT_EQ(chat_template.has_generation_markers(false), expected.at("has_generation_markers").get<bool>());

  const auto rows = read_rows(dir + "/conversations.jsonl");
  const auto& cases = expected.at("conversations");
  EXPECT_EQ(rows.size(), cases.size());
  for (size_t i = 0; i < std::min(rows.size(), cases.size()); ++i) {
    const json& c = cases[i];
    SCOPED_TRACE(c.at("name").get<std::string>());
    const Conversation conversation = conversation_of_row(RowFormat::Messages, rows[i]);
    const bool generation_prompt = c.at("add_generation_prompt").get<bool>();
    if (!c.at("error").is_null()) {
      EXPECT_THROW(chat_template.render(conversation, generation_prompt), Error) << c.at("error").dump();
      ++counts.raised;
      continue;
    }
    RenderedChat rendered;
    try {
      rendered = chat_template.render(conversation, generation_prompt);
    } catch (const Error& e) {
      ADD_FAILURE() << "unexpected error: " << e.what();
      continue;
    }
    EXPECT_EQ(rendered.text, c.at("text").get<std::string>());
    EXPECT_EQ(tokenizer->encode(rendered.text, false), c.at("input_ids").get<std::vector<int32_t>>());
    ++counts.rendered;
    if (generation_prompt) continue;
    const std::vector<int32_t>& ids = c.at("input_ids").get<std::vector<int32_t>>();
    if (c.contains("assistant_masks_generation")) {
      const Sample sample = tokenize_conversation(chat_template, conversation, *tokenizer, true);
      EXPECT_EQ(sample.input_ids, ids);
      const auto reference_mask = c.at("assistant_masks_generation").get<std::vector<int32_t>>();
      EXPECT_EQ(mask_of(sample), reference_mask) << "TRL's mask: " << first_difference(mask_of(sample), reference_mask, ids);
      ++counts.masks;
    } else if (!c.at("prefix_error").is_null()) {
      EXPECT_THROW(tokenize_conversation(chat_template, conversation, *tokenizer, true), Error);
    } else {
      const Sample sample = tokenize_conversation(chat_template, conversation, *tokenizer, true);
      EXPECT_EQ(sample.input_ids, ids);
      const auto reference_mask = c.at("assistant_masks_prefix_tokens").get<std::vector<int32_t>>();
      EXPECT_EQ(mask_of(sample), reference_mask) << "prefix mask: " << first_difference(mask_of(sample), reference_mask, ids);
      ++counts.masks;
    }
    const Sample everything = tokenize_conversation(chat_template, conversation, *tokenizer, false);
    EXPECT_EQ(everything.labels, everything.input_ids);
  }

  RowTokenization how;
  how.tokenizer = tokenizer.get();
  how.chat_template = &chat_template;
  for (const auto& [file, key] : {std::pair<std::string, std::string>{"prompt_completion.jsonl", "prompt_completion"},
                                  {"plain_prompt_completion.jsonl", "plain_prompt_completion"}}) {
    const auto pair_rows = read_rows(dir + "/" + file);
    const auto& pair_cases = expected.at(key);
    EXPECT_EQ(pair_rows.size(), pair_cases.size());
    for (size_t i = 0; i < std::min(pair_rows.size(), pair_cases.size()); ++i) {
      SCOPED_TRACE(key + " " + std::to_string(i));
      const json& c = pair_cases[i];
      if (c.contains("error") && !c.at("error").is_null()) {
        EXPECT_THROW(tokenize_row(RowFormat::PromptCompletion, pair_rows[i], how), Error);
        continue;
      }
      Sample sample;
      try {
        sample = tokenize_row(RowFormat::PromptCompletion, pair_rows[i], how);
      } catch (const Error& e) {
        ADD_FAILURE() << key << " row " << i << ": " << e.what();
        continue;
      }
      EXPECT_EQ(sample.input_ids, c.at("input_ids").get<std::vector<int32_t>>());
      EXPECT_EQ(mask_of(sample), c.at("completion_mask").get<std::vector<int32_t>>());
      ++counts.completions;
    }
  }
  return counts;
}

class ChatTemplateFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFamilies, MatchTransformersAndTrl) {
  const FamilyCounts counts = check_family(GetParam());
  EXPECT_GE(counts.rendered, 6);
  EXPECT_GE(counts.masks, 5);
  EXPECT_GE(counts.completions, 3);
}

// The families the generator writes (families.json); a family missing there fails the test.
const std::vector<std::string> kFamilies = {
    "llama3", "llama3_1", "llama3_2", "qwen2_5", "qwen3_think", "qwen3_nothink", "deepseek_r1_distill",
    "gemma2", "gemma3", "phi3_5", "mistral_v0_1", "mistral_v0_3", "mistral_nemo", "phi_4", "smollm2", "chatml",
    "hermes2_pro", "llama3_training", "qwen2_5_training", "qwen3_training", "deepseek_r1_distill_training",
    "gemma2_training", "gemma3_training", "phi3_5_training"};

INSTANTIATE_TEST_SUITE_P(RealTemplates, ChatTemplateFamilies, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(ChatTemplateFamilyList, EveryGeneratedFamilyIsTested) {
  const json families = reference::load_json_fixture("chat_templates", "families.json");
  std::vector<std::string> generated;
  for (const auto& family : families) generated.push_back(family.at("family"));
  EXPECT_EQ(generated, kFamilies);
}

}  // namespace
}  // namespace finetune
