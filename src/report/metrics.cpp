#include "finetune/report/metrics.h"

#include <nlohmann/json.hpp>

#include "finetune/util/errors.h"

namespace finetune {

std::string metrics_json_line(const StepMetrics& m) { return metrics_json(m).dump(); }

nlohmann::json metrics_json(const StepMetrics& m) {
  nlohmann::json json = {{"step", m.step},       {"epoch", m.epoch},         {"loss", m.loss},
                         {"lr", m.lr},           {"grad_norm", m.grad_norm}, {"tokens", m.tokens},
                         {"tokens_per_s", m.tokens_per_s}, {"elapsed_s", m.elapsed_s},
                         {"rank_imbalance", m.rank_imbalance}};
  for (const auto& [name, value] : m.objective_metrics) json[name] = value;
  if (m.peak_memory_gib) json["peak_memory_gib"] = *m.peak_memory_gib;
  if (m.eval_loss) json["eval_loss"] = *m.eval_loss;
  return json;
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
  if (!out_) throw Error(path + ": cannot open for writing");
}

void MetricsWriter::write(const StepMetrics& metrics) { write_line(metrics_json_line(metrics)); }

void MetricsWriter::write_line(const std::string& json_line) {
  out_ << json_line << '\n';
  out_.flush();
  if (!out_) throw Error(path_ + ": write failed");
}

}  // namespace finetune
