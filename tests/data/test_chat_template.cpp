// Chat formats against transformers' apply_chat_template renderings of the real templates.
#include <gtest/gtest.h>

#include "finetune/data/chat_template.h"
#include "finetune/util/errors.h"
#include "fixtures.h"

namespace finetune {
namespace {

using data_test::load_data_fixture;

std::string joined(const std::vector<TextSegment>& segments) {
  std::string text;
  for (const TextSegment& segment : segments) text += segment.text;
  return text;
}

std::string joined_trainable(const std::vector<TextSegment>& segments) {
  std::string text;
  for (const TextSegment& segment : segments) {
    if (segment.trainable) text += segment.text;
  }
  return text;
}

// What each format trains on for one assistant message: its content (as the template writes it)
// and the end-of-turn token.
std::string expected_trainable_piece(ChatFormat format, const std::string& content, const std::string& eos) {
  switch (format) {
    case ChatFormat::ChatMl:
    case ChatFormat::ChatMlQwen: return content + "<|im_end|>";
    case ChatFormat::Llama3: return python_strip(content) + "<|eot_id|>";
    case ChatFormat::Mistral: return " " + content + eos;
    case ChatFormat::Alpaca: break;
  }
  return "<not a chat format>";
}

TEST(ChatFormatRendering, RendersExactlyLikeTransformers) {
  const nlohmann::json fixture = load_data_fixture("chat_templates.json");
  ASSERT_EQ(fixture.at("families").size(), 4u);
  int checked = 0;
  for (const auto& family : fixture.at("families")) {
    const std::string name = family.at("format");
    const ChatFormat format = chat_format_from_name(name, "");
    EXPECT_EQ(chat_format_name(format), name);
    EXPECT_EQ(chat_format_from_name("auto", family.at("template").get<std::string>()), format) << name;
    const std::string bos = family.at("bos");
    const std::string eos = family.at("eos");
    for (const auto& c : family.at("cases")) {
      SCOPED_TRACE(name + " / " + c.at("name").get<std::string>());
      std::vector<ChatMessage> messages;
      std::string expected_trainable;
      for (const auto& m : c.at("messages")) {
        messages.push_back({m.at("role"), m.at("content")});
        if (m.at("role") == "assistant") expected_trainable += expected_trainable_piece(format, m.at("content"), eos);
      }
      if (c.at("error").get<bool>()) {
        EXPECT_THROW(render_conversation(format, messages, bos, eos), Error);
        continue;
      }
      const std::vector<TextSegment> segments = render_conversation(format, messages, bos, eos);
      EXPECT_EQ(joined(segments), c.at("expected").get<std::string>());
      EXPECT_EQ(joined_trainable(segments), expected_trainable);
      for (size_t i = 0; i + 1 < segments.size(); ++i) {
        EXPECT_NE(segments[i].trainable, segments[i + 1].trainable) << "adjacent segments not merged at " << i;
      }
      for (const TextSegment& segment : segments) EXPECT_FALSE(segment.text.empty());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * 13 + 10);  // every conversation renders, except Mistral's three invalid ones
}

TEST(ChatFormatRendering, AssistantTurnSegmentsForChatMl) {
  const std::vector<TextSegment> segments =
      render_conversation(ChatFormat::ChatMl, {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Bye"}}, "", "");
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(segments[0].trainable);
  EXPECT_EQ(segments[1].text, "Yo<|im_end|>");
  EXPECT_TRUE(segments[1].trainable);
  EXPECT_EQ(segments[2].text, "\n<|im_start|>user\nBye<|im_end|>\n");
  EXPECT_FALSE(segments[2].trainable);
}

TEST(ChatFormatRendering, Llama3WritesBosAndHeadersAreNotTrainable) {
  const std::vector<TextSegment> segments =
      render_conversation(ChatFormat::Llama3, {{"user", " Hi "}, {"assistant", "Yo\n"}}, "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(segments[1].text, "Yo<|eot_id|>");
  EXPECT_TRUE(segments[1].trainable);
}

TEST(ChatFormatRendering, AutoDetection) {
  EXPECT_EQ(chat_format_from_name("auto", "{{'<|im_start|>' + message['role']}}"), ChatFormat::ChatMl);
  EXPECT_EQ(chat_format_from_name("auto", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                                          "helpful assistant.<|im_end|>"),
            ChatFormat::ChatMlQwen);
  EXPECT_EQ(chat_format_from_name("auto", "{{ '<|start_header_id|>' }}"), ChatFormat::Llama3);
  EXPECT_EQ(chat_format_from_name("auto", "{{ '[INST] ' + content }}"), ChatFormat::Mistral);
  EXPECT_EQ(chat_format_from_name("auto", ""), ChatFormat::Alpaca);
  EXPECT_EQ(chat_format_from_name("auto", "{{ messages }}"), ChatFormat::Alpaca);
  EXPECT_EQ(chat_format_from_name("llama-3", ""), ChatFormat::Llama3);
  EXPECT_EQ(chat_format_from_name("qwen", ""), ChatFormat::ChatMlQwen);
  EXPECT_EQ(chat_format_from_name("alpaca", "<|im_start|>"), ChatFormat::Alpaca);
  try {
    chat_format_from_name("vicuna", "");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("vicuna"), std::string::npos);
  }
}

TEST(ChatFormatRendering, RejectsBadConversations) {
  EXPECT_THROW(render_conversation(ChatFormat::ChatMl, {}, "", ""), Error);
  try {
    render_conversation(ChatFormat::ChatMl, {{"user", "a"}, {"tool", "b"}}, "", "");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tool"), std::string::npos);
  }
  EXPECT_THROW(render_conversation(ChatFormat::Alpaca, {{"user", "a"}}, "", ""), Error);
  EXPECT_THROW(render_conversation(ChatFormat::Mistral, {{"system", "s"}, {"system", "t"}}, "<s>", "</s>"), Error);
}

TEST(ChatFormatRendering, PythonStrip) {
  EXPECT_EQ(python_strip(""), "");
  EXPECT_EQ(python_strip(" \t\n"), "");
  EXPECT_EQ(python_strip("  a b  "), "a b");
  EXPECT_EQ(python_strip("\xE3\x80\x80x\xC2\xA0"), "x");                     // U+3000, U+00A0
  EXPECT_EQ(python_strip("\xC2\x85x\xE2\x80\xA8\x1F"), "x");                 // U+0085, U+2028, U+001F
  EXPECT_EQ(python_strip("\xE2\x80\x8Bx"), "\xE2\x80\x8Bx");                 // U+200B is not a space
  EXPECT_EQ(python_strip("\x85x\xA0"), "\x85x\xA0");                         // stray bytes are kept
  EXPECT_EQ(python_strip(" \xF0\x9F\x98\x80 "), "\xF0\x9F\x98\x80");         // emoji
  EXPECT_EQ(python_strip("x\xE2\x80"), "x\xE2\x80");                         // truncated sequence
}

TEST(ChatFormatRendering, AlpacaMatchesUnslothPrompt) {
  const nlohmann::json fixture = load_data_fixture("alpaca.json");
  const std::string eos = fixture.at("eos");
  ASSERT_EQ(fixture.at("cases").size(), 3u);
  for (const auto& c : fixture.at("cases")) {
    const std::vector<TextSegment> segments = render_alpaca(c.at("instruction"), c.at("input"), c.at("output"), eos);
    ASSERT_EQ(segments.size(), 2u);
    EXPECT_EQ(joined(segments), c.at("expected").get<std::string>());
    EXPECT_FALSE(segments[0].trainable);
    EXPECT_TRUE(segments[1].trainable);
    EXPECT_EQ(segments[1].text, c.at("output").get<std::string>() + eos);
  }
}

}  // namespace
}  // namespace finetune
