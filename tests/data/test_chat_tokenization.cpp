// Whole pipeline with real tokenizers and real chat templates: the token ids of a rendered
// conversation (and of an alpaca row) equal what transformers produces for it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "finetune/data/chat_template.h"
#include "finetune/data/dataset.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {
namespace {

std::string family_dir(const std::string& family) {
  const char* root = std::getenv("FINETUNE_FIXTURES");
  const std::string dir = std::string(root ? root : "") + "/chat_tokens/" + family;
  if (!root || !std::filesystem::exists(dir + "/expected.json")) {
    ADD_FAILURE() << "fixtures missing: run tests/reference/make_chat_tokens_fixtures.py $FINETUNE_FIXTURES/chat_tokens";
  }
  return dir;
}

void expect_matches_transformers(const std::string& family) {
  const std::string dir = family_dir(family);
  nlohmann::json expected;
  std::ifstream(dir + "/expected.json") >> expected;
  const auto tokenizer = load_tokenizer(dir);
  const ChatTemplate chat_template = ChatTemplate::select("auto", tokenizer->special_tokens().chat_templates,
                                                         tokenizer->special_tokens(), nlohmann::ordered_json::object());
  DatasetOptions options;
  options.max_seq_length = 4096;
  options.chat_template = &chat_template;

  const auto chats = load_dataset({dir + "/conversations.jsonl"}, tokenizer.get(), options);
  ASSERT_EQ(chats.samples.size(), expected["conversations"].size());
  for (size_t i = 0; i < chats.samples.size(); ++i) {
    const auto& sample = chats.samples[i];
    EXPECT_EQ(sample.input_ids, expected["conversations"][i].get<std::vector<int32_t>>()) << family << " row " << i;
    int64_t trainable = 0;
    for (size_t t = 0; t < sample.labels.size(); ++t) {
      if (sample.labels[t] == kIgnoreIndex) continue;
      EXPECT_EQ(sample.labels[t], sample.input_ids[t]);
      ++trainable;
    }
    EXPECT_GT(trainable, 0);
    EXPECT_LT(trainable, static_cast<int64_t>(sample.labels.size()));  // the prompt is masked
  }

  const auto alpaca = load_dataset({dir + "/alpaca.jsonl"}, tokenizer.get(), options);
  ASSERT_EQ(alpaca.samples.size(), expected["alpaca"].size());
  for (size_t i = 0; i < alpaca.samples.size(); ++i) {
    EXPECT_EQ(alpaca.samples[i].input_ids, expected["alpaca"][i].get<std::vector<int32_t>>()) << family << " alpaca " << i;
  }
}

TEST(ChatTokenization, Llama3TemplateAndByteLevelBpeMatchTransformers) { expect_matches_transformers("llama3"); }
TEST(ChatTokenization, ChatMlTemplateAndNfcByteLevelBpeMatchTransformers) { expect_matches_transformers("chatml"); }
TEST(ChatTokenization, MistralTemplateAndSentencePieceMatchTransformers) { expect_matches_transformers("mistral"); }

}  // namespace
}  // namespace finetune
