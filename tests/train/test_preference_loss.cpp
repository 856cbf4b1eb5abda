// Preference losses against TRL 1.16's own code: DPOTrainer._compute_loss (sigmoid, hinge, ipo,
// robust at several beta / label_smoothing) and ORPOTrainer.get_batch_loss_metrics, run by
// tests/reference/make_preference_fixtures.py on fixed random log-probs; loss and every logged
// metric agree within 1e-6 relative in fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../reference/fixtures.h"
#include "finetune/train/preference_loss.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

constexpr double kRelative = 1e-6;

at::Tensor fp32(const nlohmann::json& values) {
  return at::tensor(values.get<std::vector<float>>(), at::kFloat);
}

PairValues pair(const nlohmann::json& chosen, const nlohmann::json& rejected) { return {fp32(chosen), fp32(rejected)}; }

void expect_close(double actual, double expected, const std::string& what, double* worst) {
  const double relative = std::abs(actual - expected) / std::max(std::abs(expected), 1e-30);
  *worst = std::max(*worst, expected == actual ? 0.0 : relative);
  EXPECT_LE(std::abs(actual - expected), kRelative * std::abs(expected)) << what << ": " << actual << " vs " << expected;
}

void expect_metrics(const PreferenceLoss& loss, const nlohmann::json& expected, const std::string& where,
                    double* worst) {
  std::map<std::string, double> means;
  for (const auto& [name, value] : metric_means(loss)) means[name] = value;
  ASSERT_EQ(means.size(), expected.size()) << where;
  for (const auto& [name, value] : expected.items()) {
    ASSERT_EQ(means.count(name), 1u) << where << " lacks " << name;
    expect_close(means[name], value.get<double>(), where + " " + name, worst);
  }
}

TEST(PreferenceLoss, DpoLossesAndMetricsMatchTrl) {
  const nlohmann::json cases = reference::load_json_fixture("preference", "losses.json")["dpo"];
  ASSERT_FALSE(cases.empty());
  double worst = 0;
  std::map<std::string, int> seen;
  for (const auto& c : cases) {
    DpoLossConfig config;
    config.loss_type = dpo_loss_type_from_name(c["loss_type"].get<std::string>());
    config.beta = c["beta"].get<double>();
    config.label_smoothing = c["label_smoothing"].get<double>();
    const PairValues lengths{at::tensor(c["chosen_lengths"].get<std::vector<int64_t>>()),
                             at::tensor(c["rejected_lengths"].get<std::vector<int64_t>>())};
    const PreferenceLoss loss =
        dpo_loss(config, pair(c["policy_chosen_logps"], c["policy_rejected_logps"]),
                 pair(c["reference_chosen_logps"], c["reference_rejected_logps"]), lengths);
    const std::string where = c["loss_type"].get<std::string>() + " beta " + std::to_string(config.beta);
    EXPECT_EQ(loss.loss.scalar_type(), at::kFloat);
    expect_close(loss.loss.item<double>(), c["loss"].get<double>(), where + " loss", &worst);
    expect_metrics(loss, c["metrics"], where, &worst);
    ++seen[c["loss_type"].get<std::string>()];
  }
  for (const char* type : {"sigmoid", "hinge", "ipo", "robust"}) EXPECT_GT(seen[type], 0) << type;
  std::printf("[ parity   ] DPO loss and metrics vs TRL: %zu cases, worst relative difference %.3g\n", cases.size(),
              worst);
}

TEST(PreferenceLoss, OrpoLossAndMetricsMatchTrl) {
  const nlohmann::json cases = reference::load_json_fixture("preference", "losses.json")["orpo"];
  ASSERT_FALSE(cases.empty());
  double worst = 0;
  for (const auto& c : cases) {
    const double beta = c["beta"].get<double>();
    const PreferenceLoss loss = orpo_loss(beta, pair(c["chosen_mean_logps"], c["rejected_mean_logps"]),
                                          at::tensor(c["nll_loss"].get<float>(), at::kFloat));
    const std::string where = "orpo beta " + std::to_string(beta);
    expect_close(loss.loss.item<double>(), c["loss"].get<double>(), where + " loss", &worst);
    expect_metrics(loss, c["metrics"], where, &worst);
  }
  std::printf("[ parity   ] ORPO loss and metrics vs TRL: %zu cases, worst relative difference %.3g\n", cases.size(),
              worst);
}

TEST(PreferenceLoss, GradientFlowsToThePolicyOnly) {
  const at::Tensor chosen = at::tensor(std::vector<float>{-3.0f, -5.0f}).requires_grad_(true);
  const at::Tensor rejected = at::tensor(std::vector<float>{-4.0f, -2.0f}).requires_grad_(true);
  const PairValues reference{at::tensor(std::vector<float>{-3.5f, -4.0f}), at::tensor(std::vector<float>{-3.0f, -3.0f})};
  const PreferenceLoss loss = dpo_loss(DpoLossConfig{}, {chosen, rejected}, reference, {});
  loss.loss.backward();
  // d/dchosen of mean(-logsigmoid(beta d)) = -beta sigmoid(-beta d) / B.
  const at::Tensor d = (chosen.detach() - reference.chosen) - (rejected.detach() - reference.rejected);
  const at::Tensor expected = -0.1 * at::sigmoid(-0.1 * d) / 2;
  EXPECT_TRUE(at::allclose(chosen.grad(), expected, 1e-6, 1e-7)) << chosen.grad() << expected;
  EXPECT_TRUE(at::allclose(rejected.grad(), -expected, 1e-6, 1e-7));
  for (const auto& [name, value] : loss.metrics) EXPECT_FALSE(value.requires_grad()) << name;
}

TEST(PreferenceLoss, InvalidSettingsAreUsageErrors) {
  EXPECT_THROW(dpo_loss_type_from_name("kto"), UsageError);
  DpoLossConfig robust;
  robust.loss_type = DpoLossType::Robust;
  robust.label_smoothing = 0.5;
  const PairValues values{at::zeros({1}), at::zeros({1})};
  EXPECT_THROW(dpo_loss(robust, values, values, {}), UsageError);
  DpoLossConfig ipo;
  ipo.loss_type = DpoLossType::Ipo;
  EXPECT_THROW(dpo_loss(ipo, values, values, {}), Error);  // ipo needs the completion token counts
}

TEST(PreferenceLoss, Log1mexpIsAccurateOnBothBranches) {
  // Near 0, log(1 - exp(x)) cancels unless through expm1; far below, unless through log1p.
  const std::vector<double> xs = {-1e-8, -0.5, -0.6931471805599453, -1.0, -30.0};
  const at::Tensor actual = log1mexp(at::tensor(xs, at::kDouble));
  for (size_t i = 0; i < xs.size(); ++i) {
    const long double x = xs[i];
    const long double expected = x > -0.6931471805599453L ? std::log(-std::expm1(x)) : std::log1p(-std::exp(x));
    EXPECT_NEAR(actual[static_cast<int64_t>(i)].item<double>(), static_cast<double>(expected),
                1e-14 * std::abs(static_cast<double>(expected)))
        << "x = " << xs[i];
  }
}

}  // namespace
}  // namespace finetune
