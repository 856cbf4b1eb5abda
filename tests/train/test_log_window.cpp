// The metrics component keeps its open window and history across state() / load_state().
#include <gtest/gtest.h>

#include "finetune/train/log_window.h"

namespace finetune {
namespace {

TEST(LogWindow, StateRestoresTheOpenWindowAndTheHistory) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const auto ranks = at::tensor({5.0, 5.0}, f64);
  LogWindow window(at::kCPU);
  for (double loss : {1.5, 2.5}) window.add_step(at::scalar_tensor(loss, f64), at::scalar_tensor(10.0, f64), ranks);
  StepMetrics line;
  line.step = 2;
  const auto logged = window.close(line);
  EXPECT_EQ(logged.loss, 2.0);
  EXPECT_EQ(logged.tokens, 20);
  window.add_step(at::scalar_tensor(4.0, f64), at::scalar_tensor(7.0, f64), ranks);
  const MetricsState state = window.state();
  EXPECT_EQ(state.step_losses, (std::vector<double>{1.5, 2.5, 4.0}));
  EXPECT_EQ(state.tokens, 27);
  ASSERT_EQ(state.log_history.size(), 1u);

  LogWindow restored(at::kCPU);
  restored.load_state(state);
  EXPECT_EQ(restored.logged_step_losses(), (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(restored.logged_tokens(), 20);
  for (LogWindow* w : {&window, &restored}) w->add_step(at::scalar_tensor(5.0, f64), at::scalar_tensor(3.0, f64), ranks);
  line.step = 4;
  const auto a = window.close(line), b = restored.close(line);
  EXPECT_EQ(a.loss, 4.5);
  EXPECT_EQ(b.loss, a.loss);
  EXPECT_EQ(b.tokens, 30);
  EXPECT_EQ(restored.history().size(), 2u);
}

// rank_imbalance: the logged step's largest rank token count over the ranks' mean; the summary
// takes the mean over the logged lines.
TEST(LogWindow, RankImbalanceOfTheLoggedStepAndItsMean) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  LogWindow window(at::kCPU);
  EXPECT_EQ(window.mean_rank_imbalance(), 1.0);
  window.add_step(at::scalar_tensor(1.0, f64), at::scalar_tensor(40.0, f64), at::tensor({10.0, 30.0}, f64));
  window.add_step(at::scalar_tensor(1.0, f64), at::scalar_tensor(40.0, f64), at::tensor({15.0, 25.0}, f64));
  StepMetrics line;
  line.step = 2;
  EXPECT_DOUBLE_EQ(window.close(line).rank_imbalance, 25.0 / 20.0);
  window.add_step(at::scalar_tensor(1.0, f64), at::scalar_tensor(40.0, f64), at::tensor({20.0, 20.0}, f64));
  line.step = 3;
  EXPECT_DOUBLE_EQ(window.close(line).rank_imbalance, 1.0);
  EXPECT_DOUBLE_EQ(window.mean_rank_imbalance(), (1.25 + 1.0) / 2);
  EXPECT_EQ(window.history().back()["rank_imbalance"].get<double>(), 1.0);
}

}  // namespace
}  // namespace finetune
