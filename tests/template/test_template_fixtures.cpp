// The engine against jinja2 as transformers configures it: byte-identical text and generation
// spans (or an error where jinja2 raises) for every feature case and for every real chat template
// TRL ships, on several conversations each.
#include <gtest/gtest.h>

#include <optional>
#include <sstream>

#include "template_fixtures.h"

namespace finetune {
namespace {

using jinja::Template;
using jinja::TemplateError;
using template_test::load_template_fixture;
using template_test::pinned_clock_options;

std::string shown(const std::string& text) { return nlohmann::json(text).dump(); }

// What went wrong with one case, or nullopt when the engine matched jinja2.
std::optional<std::string> compare(const std::string& source, const nlohmann::ordered_json& context,
                                   const nlohmann::ordered_json& expected) {
  std::optional<Template::Output> output;
  std::optional<TemplateError> error;
  try {
    const Template tmpl(source, "chat template", pinned_clock_options());
    output = tmpl.render(context);
  } catch (const TemplateError& e) {
    error = e;
  }
  if (expected.contains("error")) {
    if (!error) return "jinja2 raises " + expected["error"].get<std::string>() + " (" +
                       expected["message"].get<std::string>() + ") but the engine rendered " + shown(output->text);
    // raise_exception()'s message passes through verbatim.
    if (expected["error"] == "TemplateError" && error->message() != expected["message"].get<std::string>()) {
      return "raise_exception message " + shown(expected["message"]) + " came out as " + shown(error->message());
    }
    return std::nullopt;
  }
  if (error) return std::string("the engine raised: ") + error->what();
  const std::string want = expected["text"].get<std::string>();
  if (output->text != want) {
    size_t at = 0;
    while (at < want.size() && at < output->text.size() && want[at] == output->text[at]) ++at;
    const size_t from = at > 40 ? at - 40 : 0;
    return "text differs at byte " + std::to_string(at) + ": want ..." + shown(want.substr(from, 100)) + " got ..." +
           shown(output->text.substr(from, 100));
  }
  std::vector<std::pair<size_t, size_t>> spans;
  for (const auto& span : expected["generation_spans"]) spans.emplace_back(span[0].get<size_t>(), span[1].get<size_t>());
  if (output->generation_spans != spans) {
    std::ostringstream message;
    message << "generation spans differ: want";
    for (const auto& [begin, end] : spans) message << " [" << begin << "," << end << ")";
    message << " got";
    for (const auto& [begin, end] : output->generation_spans) message << " [" << begin << "," << end << ")";
    return message.str();
  }
  return std::nullopt;
}

struct Tally {
  size_t cases = 0;
  std::vector<std::string> failures;
};

Tally compare_cases(bool trl_templates) {
  const nlohmann::ordered_json fixture = load_template_fixture("cases.json");
  Tally tally;
  for (const auto& item : fixture["cases"]) {
    const std::string template_name = item["template"].get<std::string>();
    if ((template_name.rfind("trl/", 0) == 0) != trl_templates) continue;
    ++tally.cases;
    const std::string source = fixture["templates"][template_name].get<std::string>();
    if (auto failure = compare(source, item["context"], item["expected"])) {
      tally.failures.push_back(item["name"].get<std::string>() + ": " + *failure);
    }
  }
  return tally;
}

std::string first_failures(const Tally& tally) {
  std::string out;
  for (size_t i = 0; i < tally.failures.size() && i < 20; ++i) out += "\n  " + tally.failures[i];
  return out;
}

TEST(TemplateFixtures, FeatureCasesRenderLikeJinja2) {
  const Tally tally = compare_cases(false);
  EXPECT_GT(tally.cases, 400u);
  EXPECT_TRUE(tally.failures.empty()) << tally.failures.size() << " of " << tally.cases << " cases differ:"
                                      << first_failures(tally);
}

TEST(TemplateFixtures, TrlChatTemplatesRenderLikeTransformers) {
  const nlohmann::ordered_json fixture = load_template_fixture("cases.json");
  size_t templates = 0;
  size_t with_generation = 0;
  for (const auto& [name, source] : fixture["templates"].items()) {
    if (name.rfind("trl/", 0) != 0) continue;
    ++templates;
    with_generation += Template(source.get<std::string>()).has_generation_markers();
  }
  EXPECT_GE(templates, 50u);
  EXPECT_GE(with_generation, 20u);  // the _training variants
  const Tally tally = compare_cases(true);
  EXPECT_GT(tally.cases, templates * 10);
  EXPECT_TRUE(tally.failures.empty()) << tally.failures.size() << " of " << tally.cases << " cases differ:"
                                      << first_failures(tally);
}

// Integers beyond 64 bits, complex numbers, bytes: jinja2 renders them, the engine refuses loudly.
TEST(TemplateFixtures, DivergencesFailInsteadOfRenderingSomethingElse) {
  const nlohmann::ordered_json divergences = load_template_fixture("divergences.json");
  ASSERT_FALSE(divergences.empty());
  for (const auto& item : divergences) {
    const std::string source = item["template"].get<std::string>();
    EXPECT_THROW(Template(source).render(item["context"]), TemplateError)
        << item["name"] << ": jinja2 renders " << item["expected"]["text"];
  }
}

}  // namespace
}  // namespace finetune
