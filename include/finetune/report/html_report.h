// Loss curves a person can look at: one self-contained HTML file (inline SVG, no script, no
// network) with a chart per metric of metrics.jsonl (report/metrics.h) against optimizer steps and
// against tokens seen, several runs overlaid with a legend. `finetune plot RUN_DIR...` writes it,
// and every training run leaves OUTPUT_DIR/report.html.
//
// Each chart is an <svg class="chart"> whose data-metric, data-x and data-x-min/-max, data-y-min/-max
// attributes give what it shows and its axis ranges (the exact extremes of the plotted values, so
// a test can compare them with metrics.jsonl); each run is one <polyline data-run="NAME"> in it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace finetune {

// One run's logged steps, in file order.
struct RunMetrics {
  std::string name;                    // the legend's label: the run directory's name
  std::vector<nlohmann::json> steps;   // metrics.jsonl's objects
};

// RUN_DIR/metrics.jsonl (or a metrics.jsonl file itself). A missing or malformed file is an Error
// naming the file and line.
RunMetrics read_run_metrics(const std::string& run_dir_or_file);

// A metric the report draws, and the metrics.jsonl key it reads.
struct ReportSeries {
  std::string key;    // "loss", "eval_loss", "lr", "grad_norm", "tokens_per_s"
  std::string title;  // "train loss", ...
};
const std::vector<ReportSeries>& report_series();

// The page for `runs` (at least one). A metric no run logged gets no chart.
std::string render_html_report(const std::vector<RunMetrics>& runs);

// render_html_report into `path`, atomically.
void write_html_report(const std::vector<RunMetrics>& runs, const std::string& path);

}  // namespace finetune
