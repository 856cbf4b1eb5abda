// metrics.jsonl fields and the run summary -> HF-named TensorBoard scalars.
#include "finetune/report/metrics_scalars.h"

namespace finetune {

std::string tensorboard_tag(const std::string& hf_key) {
  const std::string eval_prefix = "eval_", test_prefix = "test_";
  if (hf_key.rfind(eval_prefix, 0) == 0) return "eval/" + hf_key.substr(eval_prefix.size());
  if (hf_key.rfind(test_prefix, 0) == 0) return "test/" + hf_key.substr(test_prefix.size());
  return "train/" + hf_key;
}

std::vector<ScalarValue> step_scalars(const StepMetrics& m) {
  // HF's order: the train log's loss, grad_norm, learning_rate, then epoch and tokens seen.
  std::vector<ScalarValue> scalars = {
      {tensorboard_tag("loss"), m.loss},
      {tensorboard_tag("grad_norm"), m.grad_norm},
      {tensorboard_tag("learning_rate"), m.lr},
      {tensorboard_tag("epoch"), m.epoch},
      {tensorboard_tag("num_input_tokens_seen"), static_cast<double>(m.tokens)},
      {tensorboard_tag("tokens_per_second"), m.tokens_per_s},
      {tensorboard_tag("elapsed_s"), m.elapsed_s},
      {tensorboard_tag("rank_imbalance"), m.rank_imbalance},
  };
  // The objective's metrics as HF's TensorBoardCallback writes TRL's logs: train/rewards/chosen, ...
  for (const auto& [name, value] : m.objective_metrics) scalars.push_back({tensorboard_tag(name), value});
  if (m.peak_memory_gib) scalars.push_back({tensorboard_tag("peak_memory_gib"), *m.peak_memory_gib});
  if (m.eval_loss) scalars.push_back({tensorboard_tag("eval_loss"), *m.eval_loss});
  return scalars;
}

std::vector<ScalarValue> summary_scalars(const RunSummaryMetrics& summary) {
  std::vector<ScalarValue> scalars = {
      {tensorboard_tag("train_loss"), summary.train_loss},
      {tensorboard_tag("train_runtime"), summary.runtime_s},
      {tensorboard_tag("train_tokens_per_second"), summary.tokens_per_s},
  };
  if (summary.eval_loss) scalars.push_back({tensorboard_tag("eval_loss"), *summary.eval_loss});
  return scalars;
}

}  // namespace finetune
