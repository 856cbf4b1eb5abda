// Chat template choice and rendering: the built-in fallbacks render exactly what the templates they
// are named after render in transformers, and mark exactly the assistant content and its
// end-of-turn token as generated; --chat_template choices (auto, names, aliases, files).
#include <gtest/gtest.h>

#include "../test_support.h"
#include "finetune/data/builtin_chat_templates.h"
#include "finetune/data/chat_template.h"
#include "finetune/util/errors.h"
#include "fixtures.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

SpecialTokens tokens(const std::string& bos, const std::string& eos) {
  SpecialTokens special;
  if (!bos.empty()) special.bos_token = bos;
  if (!eos.empty()) special.eos_token = eos;
  return special;
}

std::string generated_text(const RenderedChat& rendered) {
  std::string text;
  for (const auto& [begin, end] : rendered.generation_spans) text += rendered.text.substr(begin, end - begin);
  return text;
}

// What each built-in trains on for one assistant message: its content as the template writes it
// and the end-of-turn token.
std::string expected_generated(const std::string& name, const std::string& content, const std::string& eos) {
  if (name == "llama3") return testing::python_strip(content) + "<|eot_id|>";
  if (name == "mistral") return " " + content + eos;
  return content + "<|im_end|>";
}

TEST(BuiltinChatTemplates, RenderExactlyLikeTransformers) {
  const nlohmann::json fixture = data_test::load_data_fixture("chat_templates.json");
  ASSERT_EQ(fixture.at("families").size(), 4u);
  int checked = 0;
  for (const auto& family : fixture.at("families")) {
    const std::string name = family.at("format");
    const std::string eos = family.at("eos").is_null() ? "" : family.at("eos").get<std::string>();
    const std::string bos = family.at("bos").is_null() ? "" : family.at("bos").get<std::string>();
    const ChatTemplate chat_template = ChatTemplate::select(name, {}, tokens(bos, eos), ordered_json::object());
    EXPECT_TRUE(chat_template.has_generation_markers(false)) << name;
    for (const auto& c : family.at("cases")) {
      SCOPED_TRACE(name + " / " + c.at("name").get<std::string>());
      Conversation conversation;
      std::string expected;
      for (const auto& m : c.at("messages")) {
        conversation.messages.push_back(ordered_json{{"role", m.at("role")}, {"content", m.at("content")}});
        if (m.at("role") == "assistant") expected += expected_generated(name, m.at("content"), eos);
      }
      if (c.at("error").get<bool>()) {
        EXPECT_THROW(chat_template.render(conversation, false), Error);
        continue;
      }
      const RenderedChat rendered = chat_template.render(conversation, false);
      EXPECT_EQ(rendered.text, c.at("expected").get<std::string>());
      EXPECT_EQ(generated_text(rendered), expected);
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

TEST(BuiltinChatTemplates, ListContentAndGenerationPrompt) {
  const ChatTemplate chatml = ChatTemplate::select("chatml", {}, {}, ordered_json::object());
  Conversation conversation;
  conversation.messages = ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}])");
  EXPECT_EQ(chatml.render(conversation, true).text, "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n");
  conversation.messages[0]["content"] = 3;
  testing::expect_contains(testing::error_message([&] { chatml.render(conversation, false); }),
                           {"built-in chatml template", "message content must be a string or a list of parts"});
}

TEST(ChatTemplateChoice, AutoNamesAliasesAndFiles) {
  const SpecialTokens special = tokens("<s>", "</s>");
  const ChatTemplates own = {{"default", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"},
                             {"tool_use", "TOOLS{{ tools | length }}"}};
  const ChatTemplate automatic = ChatTemplate::select("auto", own, special, ordered_json::object());
  EXPECT_EQ(automatic.description(), "the tokenizer's chat_template");
  Conversation conversation;
  conversation.messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(automatic.render(conversation, false).text, "<s>hi");
  conversation.tools = ordered_json::parse(R"([{"type": "function"}])");
  EXPECT_EQ(automatic.render(conversation, false).text, "TOOLS1") << "rows with tools use the tool_use template";

  testing::expect_contains(testing::error_message([&] { ChatTemplate::select("auto", {}, special, {}); }),
                           {"the tokenizer has no default chat template", "chatml", ".jinja file"});
  testing::expect_contains(testing::error_message([&] { ChatTemplate::select("vicuna", {}, special, {}); }),
                           {"\"vicuna\" is neither a template name"});
  testing::expect_contains(testing::error_message([&] { ChatTemplate::select("alpaca", own, special, {}); }),
                           {"alpaca applies to instruction/input/output rows only"});
  EXPECT_EQ(ChatTemplate::select("qwen", {}, special, {}).description(),
            "built-in qwen2.5 (with {% generation %} markers)");

  testing::TempDir dir("chat_template_file");
  dir.write("t.jinja", "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ extra }}\n");
  const ChatTemplate file = ChatTemplate::select(dir.file("t.jinja"), own, special, ordered_json{{"extra", "!"}});
  EXPECT_EQ(file.description(), "file " + dir.file("t.jinja"));
  conversation.tools = nullptr;
  EXPECT_EQ(file.render(conversation, false).text, "[user]hi!") << "one trailing newline is dropped, as jinja2 does";
  conversation.kwargs = ordered_json{{"extra", "?"}};
  EXPECT_EQ(file.render(conversation, false).text, "[user]hi?") << "the row's kwargs win over --chat_template_kwargs";
  testing::expect_contains(testing::error_message([&] { ChatTemplate::select(dir.file("missing.jinja"), {}, special, {}); }),
                           {"cannot open template file", "missing.jinja"});
  dir.write("bad.jinja", "line one\n{% for %}\n");
  testing::expect_contains(testing::error_message([&] { ChatTemplate::select(dir.file("bad.jinja"), {}, special, {}); }),
                           {"bad.jinja", "line 2"});
}

}  // namespace
}  // namespace finetune
