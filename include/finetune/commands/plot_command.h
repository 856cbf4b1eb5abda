// `finetune plot RUN_DIR [RUN_DIR ...] [--out FILE]`: the loss curves of one or more runs'
// metrics.jsonl as one self-contained HTML page (report/html_report.h). It reads no model and no
// option of the other commands, so it parses its own few words.
#pragma once

#include <string>
#include <vector>

namespace finetune {

struct PlotRequest {
  std::vector<std::string> run_dirs;  // each a run's --output_dir (or a metrics.jsonl file)
  std::string out = "report.html";
  bool help = false;
};

// The words after `plot`. Throws UsageError on an unknown flag, a flag without its value or no
// run directory.
PlotRequest parse_plot_arguments(const std::vector<std::string>& words);

std::string plot_usage();

// Writes the report and prints its path; returns the exit status.
int run_plot(const PlotRequest& request);

}  // namespace finetune
