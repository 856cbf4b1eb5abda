// The smoke-test check of --require_loss_decrease: did training lower the loss at all?
#pragma once

#include <vector>

namespace finetune {

// The mean loss of the last quarter of the steps (at least one step) must be below that of the
// first quarter. Throws Error with both means and the step counts otherwise, or with fewer than
// two steps.
void require_loss_decrease(const std::vector<double>& step_losses);

}  // namespace finetune
