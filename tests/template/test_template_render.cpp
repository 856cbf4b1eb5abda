// The engine's API and the behaviours callers rely on: generation spans in byte offsets, the
// render context as globals, Python's printing of JSON values, jinja2's Undefined, the clock.
#include <gtest/gtest.h>

#include <regex>

#include "finetune/template/template.h"

namespace finetune {
namespace {

using jinja::Template;
using jinja::TemplateError;

std::string render(const std::string& source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  return Template(source).render(context).text;
}

TEST(TemplateRender, ContextKeysAreGlobals) {
  nlohmann::ordered_json context;
  context["messages"] = {{{"role", "user"}, {"content", "hi"}}};
  context["add_generation_prompt"] = true;
  context["bos_token"] = "<s>";
  EXPECT_EQ(render("{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m['content'] }}{% endfor %}"
                   "{% if add_generation_prompt %}>{% endif %}",
                   context),
            "<s>user:hi>");
  EXPECT_EQ(render("{{ messages is defined }}"), "False");
  EXPECT_EQ(Template("{{ x }}").render(nullptr).text, "");
  EXPECT_THROW(Template("{{ x }}").render(nlohmann::ordered_json::array()), TemplateError);
}

TEST(TemplateRender, JsonValuesPrintAsPython) {
  const auto context = nlohmann::ordered_json::parse(R"({"f": 1.0, "g": 2.5, "i": 3, "t": true, "n": null,
      "l": ["a", 1, 1.5, null, false], "d": {"z": 1, "a": {"k": "it's"}}})");
  EXPECT_EQ(render("{{ f }} {{ g }} {{ i }} {{ t }} {{ n }} {{ l }} {{ d }}", context),
            "1.0 2.5 3 True None ['a', 1, 1.5, None, False] {'z': 1, 'a': {'k': \"it's\"}}");
  EXPECT_EQ(render("{{ d|tojson }} {{ l|tojson }}", context),
            "{\"z\": 1, \"a\": {\"k\": \"it's\"}} [\"a\", 1, 1.5, null, false]");
}

TEST(TemplateRender, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(render("[{{ x }}][{{ x|default('d') }}][{{ x is defined }}][{% for i in x %}{{ i }}{% endfor %}]"
                   "[{{ 'yes' if x else 'no' }}][{{ x|length }}][{{ x ~ '!' }}][{{ {'a': 1}.b }}]"),
            "[][d][False][][no][0][!][]");
  EXPECT_THROW(render("{{ x.attr }}"), TemplateError);
  EXPECT_THROW(render("{{ x + 1 }}"), TemplateError);
  EXPECT_THROW(render("{{ x() }}"), TemplateError);
  EXPECT_THROW(render("{{ x[0] }}"), TemplateError);
}

TEST(TemplateRender, GenerationSpansAreByteOffsets) {
  const Template tmpl("é{% generation %}ü🙂{% endgeneration %}x{% generation %}{% endgeneration %}");
  EXPECT_TRUE(tmpl.has_generation_markers());
  const Template::Output output = tmpl.render({});
  EXPECT_EQ(output.text, "éü🙂x");
  using Spans = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(output.generation_spans, (Spans{{2, 8}, {9, 9}}));
  EXPECT_EQ(output.text.substr(2, 6), "ü🙂");
  EXPECT_FALSE(Template("{{ 'generation' }}{# {% generation %} #}").has_generation_markers());
}

TEST(TemplateRender, StrftimeNowUsesTheLocalClock) {
  const std::string date = render("{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%d %b %Y') }}");
  EXPECT_TRUE(std::regex_match(date, std::regex(R"(\d{4}-\d{2}-\d{2}\|\d{2} [A-Z][a-z]{2} \d{4})"))) << date;
}

TEST(TemplateRender, TemplatesAreReusableAndCopyable) {
  const Template original("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
  const Template copy = original;
  EXPECT_EQ(original.render({{"xs", {1, 2, 3}}}).text, "6");
  EXPECT_EQ(copy.render({{"xs", {4}}}).text, "4");
  EXPECT_EQ(original.render({{"xs", {1, 2, 3}}}).text, "6");
  EXPECT_EQ(copy.name(), "chat template");
}

}  // namespace
}  // namespace finetune
