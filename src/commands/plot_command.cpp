#include "finetune/commands/plot_command.h"

#include <iostream>

#include "finetune/report/html_report.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {

std::string plot_usage() {
  return "usage: finetune plot RUN_DIR [RUN_DIR ...] [--out FILE]\n\n"
         "Draws the loss, eval loss, learning rate, gradient norm and tokens/s of each run's\n"
         "RUN_DIR/metrics.jsonl against steps and against tokens seen, the runs overlaid, into one\n"
         "self-contained HTML file (inline SVG; no script, no network).\n\n"
         "  --out FILE   the HTML file to write (default report.html)\n"
         "  --help       this text\n";
}

PlotRequest parse_plot_arguments(const std::vector<std::string>& words) {
  PlotRequest request;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word == "--help" || word == "-h") {
      request.help = true;
    } else if (word == "--out") {
      if (i + 1 == words.size()) throw UsageError("--out: `finetune plot --out` needs a file name");
      request.out = words[++i];
    } else if (word.rfind("--out=", 0) == 0) {
      request.out = word.substr(6);
    } else if (word.rfind("-", 0) == 0) {
      throw UsageError(word + " is not an option of `finetune plot` (it takes RUN_DIR... and --out FILE)");
    } else {
      request.run_dirs.push_back(word);
    }
  }
  if (request.out.empty()) throw UsageError("--out: `finetune plot --out` needs a file name");
  if (!request.help && request.run_dirs.empty()) {
    throw UsageError("`finetune plot` needs at least one run directory (an --output_dir holding metrics.jsonl)");
  }
  return request;
}

int run_plot(const PlotRequest& request) {
  if (request.help) {
    std::cout << plot_usage();
    return 0;
  }
  std::vector<RunMetrics> runs;
  for (const auto& dir : request.run_dirs) runs.push_back(read_run_metrics(dir));
  write_html_report(runs, request.out);
  log::info("report of " + std::to_string(runs.size()) + " run(s) written to " + request.out);
  std::cout << request.out << std::endl;
  return 0;
}

}  // namespace finetune
