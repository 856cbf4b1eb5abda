#include "finetune/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

// Chart geometry in SVG user units: the plot area sits inside the margins.
constexpr double kWidth = 520, kHeight = 280;
constexpr double kLeft = 70, kRight = 16, kTop = 28, kBottom = 44;
constexpr int kTicks = 5;

// Distinguishable line colours (Tableau 10), cycled when there are more runs.
const char* const kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

struct XAxis {
  std::string key;    // metrics.jsonl's key: "step" or "tokens"
  std::string title;
};
const std::vector<XAxis>& x_axes() {
  static const std::vector<XAxis> axes = {{"step", "optimizer step"}, {"tokens", "tokens seen"}};
  return axes;
}

struct Point {
  double x, y;
};

struct Range {
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  void add(double v) { min = std::min(min, v), max = std::max(max, v); }
  bool empty() const { return min > max; }
  // The span drawn: a single value gets a small band around it so it lands mid-chart.
  std::pair<double, double> drawn() const {
    if (max > min) return {min, max};
    const double pad = min == 0 ? 1.0 : std::abs(min) * 0.05;
    return {min - pad, max + pad};
  }
};

std::string escape_html(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Exact (round-trip) text of a value, for the data attributes a test reads back.
std::string exact(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

// Short text of a value, for tick labels.
std::string label(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

// The (x, y) pairs of one run where both keys hold finite numbers (a skipped fp16 step logs a
// null grad_norm; eval_loss is only on evaluation lines).
std::vector<Point> run_points(const RunMetrics& run, const std::string& x_key, const std::string& y_key) {
  std::vector<Point> points;
  for (const auto& step : run.steps) {
    const auto x = step.find(x_key), y = step.find(y_key);
    if (x == step.end() || y == step.end() || !x->is_number() || !y->is_number()) continue;
    const double xv = x->get<double>(), yv = y->get<double>();
    if (std::isfinite(xv) && std::isfinite(yv)) points.push_back({xv, yv});
  }
  return points;
}

std::string axis_markup(const Range& xs, const Range& ys, const std::string& x_title) {
  std::ostringstream svg;
  const double right = kWidth - kRight, bottom = kHeight - kBottom;
  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << right - kLeft << "\" height=\""
      << bottom - kTop << "\" fill=\"#fff\" stroke=\"#999\"/>\n";
  const auto [x0, x1] = xs.drawn();
  const auto [y0, y1] = ys.drawn();
  for (int i = 0; i <= kTicks; ++i) {
    const double f = static_cast<double>(i) / kTicks;
    const double x = kLeft + f * (right - kLeft), y = bottom - f * (bottom - kTop);
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << y << "\" x2=\"" << right << "\" y2=\"" << y
        << "\" stroke=\"#eee\"/>\n";
    svg << "<text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << label(y0 + f * (y1 - y0))
        << "</text>\n";
    svg << "<text x=\"" << x << "\" y=\"" << bottom + 16 << "\" text-anchor=\"middle\">" << label(x0 + f * (x1 - x0))
        << "</text>\n";
  }
  svg << "<text x=\"" << (kLeft + right) / 2 << "\" y=\"" << kHeight - 8 << "\" text-anchor=\"middle\">"
      << escape_html(x_title) << "</text>\n";
  return svg.str();
}

std::string series_markup(const std::vector<Point>& points, const Range& xs, const Range& ys, const std::string& run,
                          const char* colour) {
  const auto [x0, x1] = xs.drawn();
  const auto [y0, y1] = ys.drawn();
  const double right = kWidth - kRight, bottom = kHeight - kBottom;
  std::ostringstream svg;
  svg << "<polyline data-run=\"" << escape_html(run) << "\" fill=\"none\" stroke=\"" << colour
      << "\" stroke-width=\"1.6\" points=\"";
  for (const auto& p : points) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.2f,%.2f ", kLeft + (p.x - x0) / (x1 - x0) * (right - kLeft),
                  bottom - (p.y - y0) / (y1 - y0) * (bottom - kTop));
    svg << buffer;
  }
  svg << "\"/>\n";
  if (points.size() == 1) {  // a polyline of one point draws nothing: mark it
    svg << "<circle cx=\"" << kLeft + (points[0].x - x0) / (x1 - x0) * (right - kLeft) << "\" cy=\""
        << bottom - (points[0].y - y0) / (y1 - y0) * (bottom - kTop) << "\" r=\"3\" fill=\"" << colour << "\"/>\n";
  }
  return svg.str();
}

// One chart, or "" when no run has a point of this metric.
std::string chart_markup(const std::vector<RunMetrics>& runs, const ReportSeries& series, const XAxis& axis) {
  std::vector<std::vector<Point>> points;
  Range xs, ys;
  for (const auto& run : runs) {
    points.push_back(run_points(run, axis.key, series.key));
    for (const auto& p : points.back()) xs.add(p.x), ys.add(p.y);
  }
  if (xs.empty()) return "";
  std::ostringstream svg;
  svg << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" data-metric=\"" << series.key << "\" data-x=\""
      << axis.key << "\" data-x-min=\"" << exact(xs.min) << "\" data-x-max=\"" << exact(xs.max) << "\" data-y-min=\""
      << exact(ys.min) << "\" data-y-max=\"" << exact(ys.max) << "\">\n";
  svg << "<text x=\"" << kLeft << "\" y=\"18\" class=\"title\">" << escape_html(series.title) << " vs "
      << escape_html(axis.title) << "</text>\n";
  svg << axis_markup(xs, ys, axis.title);
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!points[i].empty()) {
      svg << series_markup(points[i], xs, ys, runs[i].name, kColours[i % std::size(kColours)]);
    }
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string legend_markup(const std::vector<RunMetrics>& runs) {
  std::ostringstream html;
  html << "<ul class=\"legend\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& last = runs[i].steps.empty() ? nlohmann::json::object() : runs[i].steps.back();
    html << "<li><span class=\"swatch\" style=\"background:" << kColours[i % std::size(kColours)] << "\"></span>"
         << escape_html(runs[i].name) << " <small>(" << runs[i].steps.size() << " logged steps";
    if (last.contains("step") && last["step"].is_number()) html << ", last step " << last["step"].dump();
    if (last.contains("loss") && last["loss"].is_number()) html << ", last loss " << label(last["loss"].get<double>());
    html << ")</small></li>\n";
  }
  html << "</ul>\n";
  return html.str();
}

}  // namespace

const std::vector<ReportSeries>& report_series() {
  static const std::vector<ReportSeries> series = {{"loss", "train loss"},
                                                   {"eval_loss", "eval loss"},
                                                   {"lr", "learning rate"},
                                                   {"grad_norm", "gradient norm"},
                                                   {"tokens_per_s", "tokens/s"}};
  return series;
}

RunMetrics read_run_metrics(const std::string& run_dir_or_file) {
  namespace fs = std::filesystem;
  const fs::path given(run_dir_or_file);
  std::error_code ec;  // a path too long or unreadable is not a directory: the read below names it
  const bool is_dir = fs::is_directory(given, ec);
  const fs::path file = is_dir ? given / "metrics.jsonl" : given;
  std::ifstream in(file);
  if (!in) throw Error(file.string() + ": cannot read (a run directory holds metrics.jsonl)");
  RunMetrics run;
  const auto dir = is_dir ? given : file.parent_path();
  run.name = fs::absolute(dir).lexically_normal().filename().string();
  if (run.name.empty()) run.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto value = parse_json(line, file.string() + ":" + std::to_string(number));
    if (!value.is_object()) throw Error(file.string() + ":" + std::to_string(number) + ": not a JSON object");
    run.steps.push_back(std::move(value));
  }
  return run;
}

std::string render_html_report(const std::vector<RunMetrics>& runs) {
  if (runs.empty()) throw UsageError("a report needs at least one run");
  std::string names;
  for (const auto& run : runs) names += (names.empty() ? "" : ", ") + run.name;
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>finetune report: "
       << escape_html(names) << "</title>\n<style>\n"
       << "body{font-family:sans-serif;margin:16px;color:#222}\n"
       << ".charts{display:flex;flex-wrap:wrap;gap:12px}\n"
       << "svg.chart{font-size:11px;background:#fafafa;border:1px solid #ddd}\n"
       << "svg.chart .title{font-size:13px;font-weight:bold}\n"
       << ".legend{list-style:none;padding:0}\n.legend li{margin:2px 0}\n"
       << ".swatch{display:inline-block;width:14px;height:4px;margin-right:6px;vertical-align:middle}\n"
       << "</style>\n</head>\n<body>\n<h1>finetune report</h1>\n"
       << legend_markup(runs) << "<div class=\"charts\">\n";
  for (const auto& axis : x_axes()) {
    for (const auto& series : report_series()) html << chart_markup(runs, series, axis);
  }
  html << "</div>\n</body>\n</html>\n";
  return html.str();
}

void write_html_report(const std::vector<RunMetrics>& runs, const std::string& path) {
  write_file_atomically(path, render_html_report(runs));
}

}  // namespace finetune
