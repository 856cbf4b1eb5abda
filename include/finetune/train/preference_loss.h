// Preference losses on per-sequence log-probabilities, as TRL 1.16 computes them, and the metrics
// TRL logs with them.
//
// DPO (trl/trainer/dpo_trainer.py, DPOTrainer._compute_loss, f_divergence_type reverse_kl): the
// inputs are log-prob SUMS over each completion, of the policy and of the reference; with
// d = (chosen - ref_chosen) - (rejected - ref_rejected), per pair:
//   sigmoid  -logsigmoid(beta d)                       (TRL 1.16's sigmoid has no label smoothing)
//   hinge    relu(1 - beta d)
//   ipo      (d' - 1 / (2 beta))^2, d' the same difference with each log-ratio divided by its
//            completion's token count (clamped to >= 1): the averages IPO uses
//   robust   (-(1 - e) logsigmoid(beta d) + e logsigmoid(-beta d)) / (1 - 2 e), e = label_smoothing
// and the micro-batch loss is the mean over its pairs. Metrics: rewards/chosen = beta (chosen -
// ref_chosen), rewards/rejected likewise, rewards/accuracies = [rewards/chosen > rewards/rejected],
// rewards/margins = their difference, logps/chosen and logps/rejected = the policy's sums.
//
// ORPO (trl/experimental/orpo/orpo_trainer.py, odds_ratio_loss and get_batch_loss_metrics):
// reference-free; the inputs are the policy's log-prob AVERAGES over each completion, and the NLL
// of the chosen rows (the mean token cross-entropy over their prompt and completion tokens):
//   log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected)),
//   loss = nll - mean(beta logsigmoid(log_odds)).
// Metrics: rewards/* as DPO's with rewards = beta * averages, logps/* the averages, nll_loss,
// log_odds_ratio = mean(logsigmoid(log_odds)), log_odds_chosen = mean(log_odds).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

// One value per pair of a micro-batch for the chosen and for the rejected rows: (B) fp32 each.
struct PairValues {
  at::Tensor chosen;
  at::Tensor rejected;
};

// Which pair slots hold real pairs where a micro-batch is padded with filler pairs (a CUDA graph's
// fixed shape: Note [Filler pairs] in train/pair_objective.h). Undefined: every slot is real.
struct RealPairs {
  at::Tensor mask;   // (P) bool
  at::Tensor count;  // () fp32: the real pairs
  bool all() const { return !mask.defined(); }
};

// The mean of a per-pair value over the real pairs: values.mean(), or (masked sum) / count.
at::Tensor real_pair_mean(const at::Tensor& values, const RealPairs& real);

enum class DpoLossType { Sigmoid, Hinge, Ipo, Robust };

// The --loss_type names ("sigmoid", "hinge", "ipo", "robust"): the parser and its help read them here.
const std::vector<std::pair<std::string, DpoLossType>>& dpo_loss_types();
// UsageError listing the names for an unknown one.
DpoLossType dpo_loss_type_from_name(const std::string& name);

struct DpoLossConfig {
  DpoLossType loss_type = DpoLossType::Sigmoid;
  double beta = 0.1;
  double label_smoothing = 0.0;  // robust only, in [0, 0.5)
};

// A micro-batch's loss and metrics. Each metric holds one value per pair slot, or a scalar for
// micro-batch quantities (ORPO's nll_loss, log_odds_ratio, log_odds_chosen); TRL logs its mean
// (over the real pairs).
struct PreferenceLoss {
  at::Tensor loss;  // fp32 scalar: TRL's loss of the micro-batch; differentiable through the inputs
  std::vector<std::pair<std::string, at::Tensor>> metrics;  // detached, TRL's names, TRL's order
  RealPairs real;   // the slots whose per-pair values count (all but filler pairs)
};

// `completion_tokens`: each row's completion token count (ipo only; may be undefined otherwise).
// `real`: the real pairs among the slots (filler pairs' values must be finite).
PreferenceLoss dpo_loss(const DpoLossConfig& config, const PairValues& policy_logps, const PairValues& reference_logps,
                        const PairValues& completion_tokens, const RealPairs& real = {});

// `mean_logps`: the policy's per-completion averages (filler pairs' in (-inf, 0)); `chosen_nll`: fp32 scalar.
PreferenceLoss orpo_loss(double beta, const PairValues& mean_logps, const at::Tensor& chosen_nll,
                         const RealPairs& real = {});

// log(1 - exp(x)) for x < 0, as TRL's log1mexp (branching at -ln 2).
at::Tensor log1mexp(const at::Tensor& x);

// Each metric's mean over its real pairs' values (what TRL logs for one micro-batch).
std::vector<std::pair<std::string, double>> metric_means(const PreferenceLoss& loss);

}  // namespace finetune
