#include "finetune/train/loss_trend.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "finetune/util/errors.h"

namespace finetune {

void require_loss_decrease(const std::vector<double>& step_losses) {
  const size_t steps = step_losses.size();
  if (steps < 2) {
    throw Error("--require_loss_decrease: needs at least 2 training steps, the run had " + std::to_string(steps));
  }
  const size_t window = std::max<size_t>(1, steps / 4);
  const double first = std::accumulate(step_losses.begin(), step_losses.begin() + window, 0.0) / window;
  const double last = std::accumulate(step_losses.end() - window, step_losses.end(), 0.0) / window;
  if (!(last < first)) {
    throw Error("--require_loss_decrease: the loss did not fall: mean of the last " + std::to_string(window) +
                " step(s) " + std::to_string(last) + ", of the first " + std::to_string(window) + " step(s) " +
                std::to_string(first));
  }
}

}  // namespace finetune
