// The HTML loss-curve report: which charts it draws, their axis ranges (the extremes of
// metrics.jsonl's values), one polyline per run, escaping, and errors naming file and line.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "../test_support.h"
#include "finetune/report/html_report.h"

namespace finetune {
namespace {

using testing::TempDir;

// Each <svg class="chart"> as its attributes, and the data-run of each polyline inside it.
struct Chart {
  std::map<std::string, std::string> attributes;
  std::vector<std::string> runs;
};

std::vector<Chart> charts_of(const std::string& html) {
  std::vector<Chart> charts;
  const std::regex svg_re(R"re(<svg class="chart"([^>]*)>([\s\S]*?)</svg>)re");
  const std::regex attribute_re(R"re(([a-z-]+)="([^"]*)")re");
  const std::regex run_re(R"re(<polyline data-run="([^"]*)")re");
  for (std::sregex_iterator it(html.begin(), html.end(), svg_re), end; it != end; ++it) {
    Chart chart;
    const std::string head = (*it)[1], body = (*it)[2];
    for (std::sregex_iterator a(head.begin(), head.end(), attribute_re); a != end; ++a) {
      chart.attributes[(*a)[1]] = (*a)[2];
    }
    for (std::sregex_iterator r(body.begin(), body.end(), run_re); r != end; ++r) chart.runs.push_back((*r)[1]);
    charts.push_back(chart);
  }
  return charts;
}

const Chart& find_chart(const std::vector<Chart>& charts, const std::string& metric, const std::string& x) {
  for (const auto& chart : charts) {
    if (chart.attributes.at("data-metric") == metric && chart.attributes.at("data-x") == x) return chart;
  }
  throw std::runtime_error("no chart " + metric + " vs " + x);
}

const char* kRunA =
    R"({"step": 1, "epoch": 0.1, "loss": 2.5, "lr": 0.0001, "grad_norm": 1.5, "tokens": 100, "tokens_per_s": 50.0, "elapsed_s": 2.0}
{"step": 2, "epoch": 0.2, "loss": 2.25, "lr": 0.0002, "grad_norm": null, "tokens": 180, "tokens_per_s": 60.0, "elapsed_s": 3.0}
{"step": 3, "epoch": 0.3, "loss": 1.75, "lr": 0.00015, "grad_norm": 0.75, "tokens": 300, "tokens_per_s": 55.0, "elapsed_s": 5.0, "eval_loss": 1.9}
)";
const char* kRunB =
    R"({"step": 1, "epoch": 0.1, "loss": 3.0, "lr": 0.0001, "grad_norm": 2.0, "tokens": 90, "tokens_per_s": 45.0, "elapsed_s": 2.0}
{"step": 2, "epoch": 0.2, "loss": 1.5, "lr": 0.0002, "grad_norm": 1.0, "tokens": 200, "tokens_per_s": 70.0, "elapsed_s": 3.5}
)";

TEST(HtmlReport, ChartsAxisRangesAndOnePolylinePerRun) {
  TempDir dir("html_report");
  std::filesystem::create_directories(dir.path() / "run-a");
  std::filesystem::create_directories(dir.path() / "run-b");
  dir.write("run-a/metrics.jsonl", kRunA);
  dir.write("run-b/metrics.jsonl", kRunB);
  const std::vector<RunMetrics> runs = {read_run_metrics(dir.file("run-a")), read_run_metrics(dir.file("run-b"))};
  EXPECT_EQ(runs[0].name, "run-a");
  EXPECT_EQ(runs[0].steps.size(), 3u);

  const auto charts = charts_of(render_html_report(runs));
  ASSERT_EQ(charts.size(), 10u);  // 5 metrics x (step, tokens)
  const auto& loss = find_chart(charts, "loss", "step");
  EXPECT_EQ(loss.runs, (std::vector<std::string>{"run-a", "run-b"}));
  EXPECT_EQ(std::stod(loss.attributes.at("data-x-min")), 1);
  EXPECT_EQ(std::stod(loss.attributes.at("data-x-max")), 3);
  EXPECT_EQ(std::stod(loss.attributes.at("data-y-min")), 1.5);
  EXPECT_EQ(std::stod(loss.attributes.at("data-y-max")), 3.0);

  const auto& lr = find_chart(charts, "lr", "tokens");
  EXPECT_EQ(std::stod(lr.attributes.at("data-x-min")), 90);
  EXPECT_EQ(std::stod(lr.attributes.at("data-x-max")), 300);
  EXPECT_EQ(std::stod(lr.attributes.at("data-y-max")), 0.0002);

  // A null grad_norm (an fp16 step skipped for overflow) is left out of the range, not read as 0.
  const auto& grad_norm = find_chart(charts, "grad_norm", "step");
  EXPECT_EQ(std::stod(grad_norm.attributes.at("data-y-min")), 0.75);
  EXPECT_EQ(std::stod(grad_norm.attributes.at("data-y-max")), 2.0);

  // Only run-a evaluated: the eval chart has its one polyline.
  const auto& eval = find_chart(charts, "eval_loss", "step");
  EXPECT_EQ(eval.runs, (std::vector<std::string>{"run-a"}));
  EXPECT_EQ(std::stod(eval.attributes.at("data-y-min")), 1.9);
}

TEST(HtmlReport, MetricNoRunLoggedHasNoChart) {
  RunMetrics run{"only", {nlohmann::json{{"step", 1}, {"loss", 2.0}, {"tokens", 10}}}};
  const auto charts = charts_of(render_html_report({run}));
  ASSERT_EQ(charts.size(), 2u);
  EXPECT_EQ(charts[0].attributes.at("data-metric"), "loss");
  EXPECT_EQ(charts[1].attributes.at("data-x"), "tokens");
}

TEST(HtmlReport, RunNamesAreEscapedAndNoScriptIsWritten) {
  RunMetrics run{"<b>&\"x'", {nlohmann::json{{"step", 1}, {"loss", 2.0}, {"tokens", 10}}}};
  const auto html = render_html_report({run});
  EXPECT_EQ(html.find("<b>&"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;&amp;&quot;x&#39;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg"), html.find("http"));  // the SVG namespace, no other URL
}

TEST(HtmlReport, ErrorsNameFileAndLine) {
  TempDir dir("html_report_errors");
  dir.write("metrics.jsonl", "{\"step\": 1, \"loss\": 2}\n[1, 2]\n");
  testing::expect_contains(testing::error_message([&] { read_run_metrics(dir.file("metrics.jsonl")); }),
                           {"metrics.jsonl:2", "not a JSON object"});
  dir.write("bad.jsonl", "{\"step\": 1,\n");
  testing::expect_contains(testing::error_message([&] { read_run_metrics(dir.file("bad.jsonl")); }), {"bad.jsonl:1"});
  testing::expect_contains(testing::error_message([&] { read_run_metrics(dir.file("missing")); }),
                           {"missing", "cannot read"});
  EXPECT_THROW(render_html_report({}), UsageError);
}

TEST(HtmlReport, WrittenAtomically) {
  TempDir dir("html_report_write");
  RunMetrics run{"r", {nlohmann::json{{"step", 1}, {"loss", 2.0}, {"tokens", 10}}}};
  write_html_report({run}, dir.file("report.html"));
  std::ifstream in(dir.file("report.html"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, render_html_report({run}));
}

}  // namespace
}  // namespace finetune
