// Every failure is a TemplateError naming the template and the line: syntax errors when parsing,
// runtime errors and raise_exception() when rendering.
#include <gtest/gtest.h>

#include "finetune/template/template.h"

namespace finetune {
namespace {

using jinja::Template;
using jinja::TemplateError;

// The error a template raises, parsing or rendering with `context`; fails the test if none.
TemplateError error_of(const std::string& source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object(),
                       const std::string& name = "chat template") {
  try {
    Template(source, name).render(context);
  } catch (const TemplateError& error) {
    return error;
  }
  ADD_FAILURE() << "no error from " << source;
  return TemplateError(name, 0, "none");
}

TEST(TemplateErrors, AreFinetuneErrors) {
  try {
    Template("{{ 1 / 0 }}").render({});
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "chat template line 1: division by zero");
  }
}

TEST(TemplateErrors, SyntaxErrorsNameTheTemplateAndLine) {
  const TemplateError unknown_filter = error_of("line 1\nline 2\n{{ x | foo }}", {}, "my template");
  EXPECT_EQ(unknown_filter.line(), 3u);
  EXPECT_STREQ(unknown_filter.what(), "my template line 3: No filter named 'foo'.");

  const TemplateError unclosed = error_of("{% for x in xs %}\n{{ x }}\n");
  EXPECT_EQ(std::string(unclosed.what()).rfind("chat template line ", 0), 0u);
  EXPECT_NE(unclosed.message().find("'endfor'"), std::string::npos) << unclosed.what();

  EXPECT_EQ(error_of("a\n\nb {% if %}").line(), 3u);
  EXPECT_EQ(error_of("{{ 'a' }}\r\n{{ ) }}").line(), 2u);
  EXPECT_EQ(error_of("{#\n\n#}{% unknown %}").message(), "Encountered unknown tag 'unknown'.");
  EXPECT_EQ(error_of("{% break %}").message(), "'break' outside of a loop");
  EXPECT_EQ(error_of("{{ 'abc }}").message(), "unexpected char '''");
}

TEST(TemplateErrors, RuntimeErrorsNameTheLineOfTheFailingExpression) {
  const TemplateError error = error_of("{% for m in messages %}\n  {{ m.content + 1 }}\n{% endfor %}",
                                       {{"messages", {{{"content", "hi"}}}}});
  EXPECT_EQ(error.line(), 2u);
  EXPECT_EQ(error.message(), "can only concatenate str (not \"int\") to str");

  const TemplateError undefined = error_of("\n\n{{ x.y }}");
  EXPECT_EQ(undefined.line(), 3u);
  EXPECT_EQ(undefined.message(), "'x' is undefined");

  const TemplateError missing = error_of("{{ {'a': 1}.b.c }}");
  EXPECT_EQ(missing.message(), "'dict object' has no attribute 'b'");
}

TEST(TemplateErrors, RaiseExceptionPassesTheMessageVerbatim) {
  const std::string source =
      "{%- for message in messages %}\n"
      "{%- if message.role not in ['user', 'assistant'] %}\n"
      "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n"
      "{%- endif %}\n"
      "{%- endfor %}";
  const TemplateError error = error_of(source, {{"messages", {{{"role", "tool"}}}}}, "model/tokenizer_config.json");
  EXPECT_EQ(error.line(), 3u);
  EXPECT_EQ(error.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
  EXPECT_STREQ(error.what(),
               "model/tokenizer_config.json line 3: Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(TemplateErrors, UnknownFiltersInsideIfFailOnlyWhenApplied) {
  // As jinja2's compiler: an {% if %} or conditional expression defers the check to runtime.
  EXPECT_EQ(Template("{% if false %}{{ x|foo }}{% endif %}ok").render({}).text, "ok");
  EXPECT_EQ(error_of("{% if true %}\n{{ x|foo }}{% endif %}").message(), "No filter named 'foo'.");
  EXPECT_EQ(error_of("{% for i in [1] %}{% if false %}{% endif %}{{ i|foo }}{% endfor %}").message(),
            "No filter named 'foo'.");
  EXPECT_EQ(error_of("{{ 1 is foo }}").message(), "No test named 'foo'.");
}

TEST(TemplateErrors, UnsupportedTagsAreSyntaxErrors) {
  EXPECT_NE(error_of("{% extends 'base' %}").message().find("not supported"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x' %}").message().find("not supported"), std::string::npos);
  EXPECT_NE(error_of("{% for x in xs recursive %}{% endfor %}").message().find("recursive"), std::string::npos);
}

}  // namespace
}  // namespace finetune
