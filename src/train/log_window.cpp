#include "finetune/train/log_window.h"

#include <algorithm>
#include <utility>

#include "finetune/util/errors.h"

namespace finetune {

LogWindow::LogWindow(const at::Device& device, std::vector<std::string> metric_names)
    : device_(device),
      metric_names_(std::move(metric_names)),
      window_tokens_(at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device))),
      window_start_(std::chrono::steady_clock::now()) {}

void LogWindow::add_step(const at::Tensor& loss, const at::Tensor& tokens, const at::Tensor& rank_tokens,
                         const at::Tensor& metrics) {
  if (metrics.defined() != !metric_names_.empty()) {
    throw Error("log window: a step's metrics must match the objective's " + std::to_string(metric_names_.size()));
  }
  window_losses_.push_back(loss);
  if (metrics.defined()) window_metrics_.push_back(metrics);
  window_tokens_ += tokens;
  last_rank_tokens_ = rank_tokens;
}

void LogWindow::restart_clock() { window_start_ = std::chrono::steady_clock::now(); }

StepMetrics LogWindow::close(StepMetrics line) {
  if (window_losses_.empty()) throw Error("log window: a log line needs at least one step since the last");
  const auto losses = at::stack(window_losses_).cpu();
  line.loss = losses.mean().item<double>();
  const auto tokens = static_cast<int64_t>(window_tokens_.item<double>());
  logged_tokens_ += tokens;
  line.tokens = logged_tokens_;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start_).count();
  line.tokens_per_s = static_cast<double>(tokens) / std::max(1e-9, seconds);
  if (last_rank_tokens_.defined()) {
    const auto rank_tokens = last_rank_tokens_.cpu();
    const double mean = rank_tokens.mean().item<double>();
    line.rank_imbalance = mean > 0 ? rank_tokens.max().item<double>() / mean : 1.0;
  }
  if (!window_metrics_.empty()) {
    const auto means = at::stack(window_metrics_).cpu().mean(0);  // (M) fp64
    for (size_t m = 0; m < metric_names_.size(); ++m) {
      line.objective_metrics.emplace_back(metric_names_[m], means[static_cast<int64_t>(m)].item<double>());
    }
  }
  for (int64_t i = 0; i < losses.size(0); ++i) logged_losses_.push_back(losses[i].item<double>());
  history_.push_back(metrics_json(line));
  window_losses_.clear();
  window_metrics_.clear();
  window_tokens_.zero_();
  restart_clock();
  return line;
}

double LogWindow::mean_rank_imbalance() const {
  double sum = 0;
  int64_t lines = 0;
  for (const auto& line : history_) {
    if (!line.contains("rank_imbalance")) continue;
    sum += line["rank_imbalance"].get<double>();
    ++lines;
  }
  return lines > 0 ? sum / static_cast<double>(lines) : 1.0;
}

MetricsState LogWindow::state() const {
  MetricsState state;
  state.log_history = history_;
  state.step_losses = logged_losses_;
  for (const auto& loss : window_losses_) state.step_losses.push_back(loss.item<double>());
  for (const auto& metrics : window_metrics_) {
    const auto values = metrics.cpu().contiguous();
    state.window_metrics.emplace_back(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
  }
  state.tokens = logged_tokens_ + static_cast<int64_t>(window_tokens_.item<double>());
  return state;
}

void LogWindow::load_state(const MetricsState& state) {
  history_ = state.log_history;
  const int64_t logged_steps = history_.empty() ? 0 : history_.back().value("step", int64_t{0});
  if (logged_steps < 0 || logged_steps > static_cast<int64_t>(state.step_losses.size())) {
    throw Error("metrics state: the last log line is at step " + std::to_string(logged_steps) + ", but " +
                std::to_string(state.step_losses.size()) + " step losses were kept");
  }
  logged_losses_.assign(state.step_losses.begin(), state.step_losses.begin() + logged_steps);
  window_losses_.clear();
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device_);
  for (size_t i = static_cast<size_t>(logged_steps); i < state.step_losses.size(); ++i) {
    window_losses_.push_back(at::scalar_tensor(state.step_losses[i], f64));
  }
  window_metrics_.clear();
  if (!metric_names_.empty()) {
    if (state.window_metrics.size() != window_losses_.size()) {
      throw Error("metrics state: " + std::to_string(window_losses_.size()) + " steps since the last log line, but " +
                  std::to_string(state.window_metrics.size()) + " steps of objective metrics were kept");
    }
    for (const auto& values : state.window_metrics) {
      if (values.size() != metric_names_.size()) throw Error("metrics state: a step's objective metrics have the wrong count");
      window_metrics_.push_back(at::tensor(values, f64));
    }
  }
  logged_tokens_ = history_.empty() ? 0 : history_.back().value("tokens", int64_t{0});
  window_tokens_.fill_(static_cast<double>(state.tokens - logged_tokens_));
  restart_clock();
}

}  // namespace finetune
