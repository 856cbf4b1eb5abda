#include "finetune/train/finite_guard.h"

#include "finetune/util/errors.h"

namespace finetune {

FiniteGuard::FiniteGuard(const at::Device& device)
    : first_bad_step_(at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device))) {}

void FiniteGuard::record(int64_t step, const at::Tensor& loss, const at::Tensor& grad_norm) {
  at::NoGradGuard no_grad;
  auto finite = at::isfinite(loss.to(at::kDouble));
  if (grad_norm.defined()) finite = finite.logical_and(at::isfinite(grad_norm.to(at::kDouble)));
  const auto first = first_bad_step_.eq(0).logical_and(finite.logical_not());
  first_bad_step_.copy_(at::where(first, at::scalar_tensor(step, first_bad_step_.options()), first_bad_step_));
}

void FiniteGuard::check(const std::string& context) const {
  const int64_t step = first_bad_step_.item<int64_t>();
  if (step == 0) return;
  throw Error("training diverged: the loss or the gradient norm of step " + std::to_string(step) +
              " is not finite (NaN or infinity; try a lower --learning_rate or --max_grad_norm); " + context);
}

}  // namespace finetune
