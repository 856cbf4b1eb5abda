// Hostile templates (they come from downloaded files) fail with a TemplateError instead of
// overflowing the stack, allocating without bound or running for hours.
#include <gtest/gtest.h>

#include <chrono>

#include "finetune/template/template.h"

namespace finetune {
namespace {

using jinja::Template;
using jinja::TemplateError;
using jinja::TemplateOptions;

std::string repeat(const std::string& text, size_t times) {
  std::string out;
  for (size_t i = 0; i < times; ++i) out += text;
  return out;
}

std::string error_message(const std::string& source, const TemplateOptions& options = {}) {
  try {
    Template(source, "chat template", options).render(nlohmann::ordered_json::object());
  } catch (const TemplateError& error) {
    return error.message();
  }
  return "<no error>";
}

TEST(TemplateLimits, DeepNestingIsASyntaxErrorNotACrash) {
  const std::pair<std::string, std::string> nestings[] = {{"(", ")"},  {"[", "]"},    {"{'a':", "}"},
                                                           {"-", ""},   {"not ", ""},  {"x if y else ", ""},
                                                           {"f(", ")"}, {"[1][", "]"}, {"x|f(", ")"}};
  for (const auto& [open, close] : nestings) {
    const std::string source = "{{ " + repeat(open, 100000) + "1" + repeat(close, 100000) + " }}";
    EXPECT_NE(error_message(source).find("nested deeper than 64 levels"), std::string::npos) << open;
  }
  EXPECT_NE(error_message(repeat("{% if true %}", 100000)).find("nested deeper"), std::string::npos);
  EXPECT_NE(error_message("{{ x" + repeat(".a", 100000) + " }}").find("nested deeper"), std::string::npos);
  EXPECT_NE(error_message("{{ x" + repeat("|trim", 100000) + " }}").find("nested deeper"), std::string::npos);
  // Chains of one operator are flat: long ones are fine.
  EXPECT_EQ(Template("{{ 0" + repeat(" + 1", 100000) + " }}").render({}).text, "100000");
  EXPECT_EQ(Template("{{ ''" + repeat(" ~ 'x'", 1000) + " }}").render({}).text, repeat("x", 1000));
}

TEST(TemplateLimits, NestingLimitIsConfigurable) {
  TemplateOptions options;
  options.max_nesting_depth = 4;
  EXPECT_NE(error_message("{{ ((((1)))) }}", options).find("nested deeper than 4 levels"), std::string::npos);
  EXPECT_EQ(error_message("{{ ((1)) }}", options), "<no error>");
}

TEST(TemplateLimits, MacroRecursionIsBounded) {
  EXPECT_EQ(error_message("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"),
            "macro calls nested deeper than 128 levels");
  // Deeply nested statements inside a recursive macro hit the evaluation-depth bound first.
  const std::string deep_body = repeat("{% if true %}", 60) + "{{ m() }}" + repeat("{% endif %}", 60);
  EXPECT_NE(error_message("{% macro m() %}" + deep_body + "{% endmacro %}{{ m() }}").find("nested deeper than"),
            std::string::npos);
  // Legitimate recursion (a tool schema walk) is fine.
  EXPECT_EQ(Template("{% macro m(n) %}{% if n > 0 %}({{ m(n - 1) }}){% endif %}{% endmacro %}{{ m(30) }}")
                .render({})
                .text,
            repeat("(", 30) + repeat(")", 30));
}

TEST(TemplateLimits, HugeRangesAndLoopsFailFast) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_message("{% for i in range(10**12) %}{% endfor %}"),
            "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_NE(error_message("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                .find("budget of 5000000 loop iterations"),
            std::string::npos);
  EXPECT_NE(error_message("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                          "{% endfor %}")
                .find("over the limit"),
            std::string::npos);
  EXPECT_NE(error_message("{{ 'x' * 10**12 }}").find("over the limit"), std::string::npos);
  EXPECT_NE(error_message("{{ [1] * 10**9 }}").find("over the limit"), std::string::npos);
  EXPECT_NE(error_message("{% for i in range(100000) %}{% set y = 'x' * 10000000 %}{% endfor %}").find("budget"),
            std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// '%*s' and '%.*s' take their width from an argument: bounded like a literal width (issue 30: a
// width of 10**9 took 2.3 GB, 2**63-1 rendered nothing), negative ones as Python reads them.
TEST(TemplateLimits, StarWidthAndPrecisionAreBoundedLikeLiteralOnes) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_message("{{ '%*s' % (1000000000, 'a') }}"), "width too big: 1000000000 (at most 100000)");
  EXPECT_EQ(error_message("{{ '%*d' % (9223372036854775807, 1) }}"),
            "width too big: 9223372036854775807 (at most 100000)");
  EXPECT_EQ(error_message("{{ '%*d' % (-9223372036854775807, 1) }}"),
            "width too big: -9223372036854775807 (at most 100000)");
  EXPECT_EQ(error_message("{{ '%.*f' % (1000000000, 1.5) }}"), "precision too big: 1000000000 (at most 100000)");
  EXPECT_EQ(error_message("{{ '%1000000000s' % 'a' }}"), "width too big: 1000000 (at most 100000)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  const auto render = [](const std::string& source) {
    return Template(source, "chat template").render(nlohmann::ordered_json::object()).text;
  };
  // as Python: "%*s" % (-5, "a") == "a    ", a negative precision is 0
  EXPECT_EQ(render("{{ '[%*s]' % (-5, 'a') }}"), "[a    ]");
  EXPECT_EQ(render("{{ '[%*d]' % (4, 7) }}"), "[   7]");
  EXPECT_EQ(render("{{ '[%.*s]' % (-1, 'abc') }}"), "[]");
  EXPECT_EQ(render("{{ '[%.*f]' % (-1, 1.5) }}"), "[2]");
  EXPECT_EQ(render("{{ ('[%*s]' % (100000, ''))|length }}"), "100002");
}

TEST(TemplateLimits, OutputSizeIsBounded) {
  TemplateOptions options;
  options.max_output_bytes = 1000;
  EXPECT_EQ(error_message("{% for i in range(500) %}xxx{% endfor %}", options), "template output exceeds 1000 bytes");
  EXPECT_EQ(error_message("{% for i in range(20) %}0123456789{% endfor %}", options), "<no error>");
  EXPECT_NE(error_message("{% set x %}{% for i in range(500) %}xxx{% endfor %}{% endset %}", options).find("exceeds"),
            std::string::npos);
}

TEST(TemplateLimits, IterationBudgetIsConfigurable) {
  TemplateOptions options;
  options.max_iterations = 100;
  EXPECT_NE(error_message("{% for i in range(200) %}{% endfor %}", options).find("budget of 100"), std::string::npos);
  EXPECT_EQ(error_message("{% for i in range(50) %}{% endfor %}", options), "<no error>");
}

TEST(TemplateLimits, ManyNamesAndBranchesStayFast) {
  const auto start = std::chrono::steady_clock::now();
  std::string branches = "{% set x = 0 %}";
  for (int i = 0; i < 50000; ++i) branches += "{% if c" + std::to_string(i) + " %}{% set v" + std::to_string(i) + " = 1 %}{% endif %}";
  EXPECT_EQ(Template(branches + "{{ x }}").render({}).text, "0");
  std::string sets = "{% for i in range(300) %}";
  for (int i = 0; i < 5000; ++i) sets += "{% set v" + std::to_string(i) + " = i %}";
  EXPECT_EQ(Template(sets + "{% endfor %}done").render({}).text, "done");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(TemplateLimits, DeepValuesAndNamespaceChainsAreSafe) {
  // A list nested 10000 deep would recurse when printed, compared or destroyed.
  EXPECT_NE(error_message("{% set ns = namespace(x=1) %}{% for i in range(10000) %}{% set ns.x = [ns.x] %}"
                          "{% endfor %}")
                .find("nested deeper than 256 levels"),
            std::string::npos);
  // A chain of 100000 namespaces is released one namespace at a time.
  EXPECT_EQ(error_message("{% set ns = namespace(head=none) %}{% for i in range(100000) %}"
                          "{% set ns.head = namespace(next=ns.head) %}{% endfor %}{% set ns.head = none %}done"),
            "<no error>");
  EXPECT_EQ(Template("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").render({}).text,
            "<Namespace {'me': <Namespace {...}>}>");
  // Context values deeper than the limit are refused.
  nlohmann::ordered_json deep = 1;
  for (int i = 0; i < 300; ++i) deep = nlohmann::ordered_json::array({deep});
  EXPECT_THROW(Template("{{ x }}").render({{"x", deep}}), TemplateError);
}

}  // namespace
}  // namespace finetune
