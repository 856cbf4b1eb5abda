// DPO and ORPO losses and metrics as TRL 1.16 computes them (see preference_loss.h). The tensor
// operations follow TRL's expressions one for one, so fp32 results agree with TRL's bit for bit
// on the same device.
#include "finetune/train/preference_loss.h"

#include "finetune/train/dpo_loss_names.h"

#include <cmath>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

void check_pairs(const PairValues& values, const std::string& what) {
  if (!values.chosen.defined() || !values.rejected.defined() || values.chosen.dim() != 1 ||
      values.chosen.sizes() != values.rejected.sizes()) {
    throw Error(what + ": chosen and rejected must be defined 1-d tensors of one size per pair");
  }
}

// The per-pair loss of one DPO loss type; `chosen_scores`/`rejected_scores` are the log-ratios.
at::Tensor dpo_per_pair_loss(const DpoLossConfig& config, const at::Tensor& chosen_scores,
                             const at::Tensor& rejected_scores, const PairValues& completion_tokens) {
  const double beta = config.beta;
  const at::Tensor delta_score = chosen_scores - rejected_scores;
  switch (config.loss_type) {
    case DpoLossType::Sigmoid:
      return -at::log_sigmoid(delta_score * beta);
    case DpoLossType::Hinge:
      return at::relu(at::rsub(delta_score * beta, 1));
    case DpoLossType::Ipo: {
      check_pairs(completion_tokens, "ipo loss completion token counts");
      const at::Tensor chosen_average = chosen_scores / completion_tokens.chosen.to(at::kFloat).clamp_min(1.0);
      const at::Tensor rejected_average = rejected_scores / completion_tokens.rejected.to(at::kFloat).clamp_min(1.0);
      return at::pow(chosen_average - rejected_average - 1 / (2 * beta), 2);
    }
    case DpoLossType::Robust: {
      const double smoothing = config.label_smoothing;
      const at::Tensor clean = at::log_sigmoid(delta_score * beta) * (-(1 - smoothing));
      const at::Tensor flipped = at::log_sigmoid(delta_score * (-beta)) * (-smoothing);
      return (clean - flipped) / (1 - 2 * smoothing);
    }
  }
  throw Error("unknown DPO loss type");
}

std::vector<std::pair<std::string, at::Tensor>> reward_metrics(const at::Tensor& chosen_rewards,
                                                               const at::Tensor& rejected_rewards) {
  return {{"rewards/chosen", chosen_rewards},
          {"rewards/rejected", rejected_rewards},
          {"rewards/accuracies", (chosen_rewards > rejected_rewards).to(at::kFloat)},
          {"rewards/margins", chosen_rewards - rejected_rewards}};
}

}  // namespace

at::Tensor real_pair_mean(const at::Tensor& values, const RealPairs& real) {
  if (real.all()) return values.mean();
  return at::where(real.mask, values, 0).sum() / real.count;
}

const std::vector<std::pair<std::string, DpoLossType>>& dpo_loss_types() {
  static const std::vector<std::pair<std::string, DpoLossType>> types = [] {
    std::vector<std::pair<std::string, DpoLossType>> out;
    const auto& names = dpo_loss_type_names();  // in DpoLossType's order
    for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], static_cast<DpoLossType>(i));
    return out;
  }();
  return types;
}

DpoLossType dpo_loss_type_from_name(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& [known, type] : dpo_loss_types()) {
    if (known == name) return type;
    names.push_back(known);
  }
  throw UsageError("--loss_type must be one of " + join(names, ", ") + ", got \"" + name + "\"");
}

PreferenceLoss dpo_loss(const DpoLossConfig& config, const PairValues& policy_logps, const PairValues& reference_logps,
                        const PairValues& completion_tokens, const RealPairs& real) {
  check_pairs(policy_logps, "DPO policy log-probs");
  check_pairs(reference_logps, "DPO reference log-probs");
  if (config.loss_type == DpoLossType::Robust && !(config.label_smoothing >= 0 && config.label_smoothing < 0.5)) {
    throw UsageError("--label_smoothing must lie in [0, 0.5) for the robust loss, got " +
                     std::to_string(config.label_smoothing));
  }
  const at::Tensor chosen_logratios = policy_logps.chosen - reference_logps.chosen;
  const at::Tensor rejected_logratios = policy_logps.rejected - reference_logps.rejected;
  PreferenceLoss result;
  result.loss = real_pair_mean(dpo_per_pair_loss(config, chosen_logratios, rejected_logratios, completion_tokens), real);
  result.real = real;
  const at::Tensor chosen_rewards = chosen_logratios.detach() * config.beta;
  const at::Tensor rejected_rewards = rejected_logratios.detach() * config.beta;
  result.metrics = reward_metrics(chosen_rewards, rejected_rewards);
  result.metrics.emplace_back("logps/chosen", policy_logps.chosen.detach());
  result.metrics.emplace_back("logps/rejected", policy_logps.rejected.detach());
  return result;
}

at::Tensor log1mexp(const at::Tensor& x) {
  const double branch = -0.6931471805599453;  // -ln 2: log1p below it, expm1 above, avoiding cancellation
  return at::where(x < branch, at::log1p(-at::exp(x)), at::log(-at::expm1(x)));
}

PreferenceLoss orpo_loss(double beta, const PairValues& mean_logps, const at::Tensor& chosen_nll,
                         const RealPairs& real) {
  check_pairs(mean_logps, "ORPO mean log-probs");
  const at::Tensor chosen = mean_logps.chosen.to(at::kFloat);
  const at::Tensor rejected = mean_logps.rejected.to(at::kFloat);
  const at::Tensor log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected));
  const at::Tensor ratio = at::log_sigmoid(log_odds);
  PreferenceLoss result;
  result.loss = chosen_nll - real_pair_mean(ratio * beta, real);
  result.real = real;
  const at::Tensor chosen_rewards = chosen.detach() * beta;
  const at::Tensor rejected_rewards = rejected.detach() * beta;
  result.metrics = reward_metrics(chosen_rewards, rejected_rewards);
  result.metrics.emplace_back("logps/rejected", rejected.detach());
  result.metrics.emplace_back("logps/chosen", chosen.detach());
  result.metrics.emplace_back("nll_loss", chosen_nll.detach());
  result.metrics.emplace_back("log_odds_ratio", real_pair_mean(ratio.detach(), real));
  result.metrics.emplace_back("log_odds_chosen", real_pair_mean(log_odds.detach(), real));
  return result;
}

std::vector<std::pair<std::string, double>> metric_means(const PreferenceLoss& loss) {
  std::vector<std::pair<std::string, double>> means;
  means.reserve(loss.metrics.size());
  for (const auto& [name, values] : loss.metrics) {
    means.emplace_back(name, (values.dim() == 0 ? values : real_pair_mean(values, loss.real)).item<double>());
  }
  return means;
}

}  // namespace finetune
