// The metrics component keeps its open window and history across state() / load_state().
#include <gtest/gtest.h>

#include "finetune/train/log_window.h"

namespace finetune {
namespace {

TEST(LogWindow, StateRestoresTheOpenWindowAndTheHistory) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  LogWindow window(at::kCPU);
  for (double loss : {1.5, 2.5}) window.add_step(at::scalar_tensor(loss, f64), at::scalar_tensor(10.0, f64));
  StepMetrics line;
  line.step = 2;
  const auto logged = window.close(line);
  EXPECT_EQ(logged.loss, 2.0);
  EXPECT_EQ(logged.tokens, 20);
  window.add_step(at::scalar_tensor(4.0, f64), at::scalar_tensor(7.0, f64));
  const MetricsState state = window.state();
  EXPECT_EQ(state.step_losses, (std::vector<double>{1.5, 2.5, 4.0}));
  EXPECT_EQ(state.tokens, 27);
  ASSERT_EQ(state.log_history.size(), 1u);

  LogWindow restored(at::kCPU);
  restored.load_state(state);
  EXPECT_EQ(restored.logged_step_losses(), (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(restored.logged_tokens(), 20);
  for (LogWindow* w : {&window, &restored}) w->add_step(at::scalar_tensor(5.0, f64), at::scalar_tensor(3.0, f64));
  line.step = 4;
  const auto a = window.close(line), b = restored.close(line);
  EXPECT_EQ(a.loss, 4.5);
  EXPECT_EQ(b.loss, a.loss);
  EXPECT_EQ(b.tokens, 30);
  EXPECT_EQ(restored.history().size(), 2u);
}

}  // namespace
}  // namespace finetune
