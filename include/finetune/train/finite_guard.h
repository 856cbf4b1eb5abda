// Catching a non-finite loss or gradient norm without a device sync per step: a device-side
// record of the first bad step, updated by every step's kernels and read only where the host
// reads anyway (log points) and before anything is saved. A run that diverges therefore stops
// at the next log point or save with an error naming the step, and no NaN adapter is written.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace finetune {

class FiniteGuard {
 public:
  explicit FiniteGuard(const at::Device& device);
  // Records `step` if loss or grad_norm (device scalars) is NaN or infinite and no step was yet.
  void record(int64_t step, const at::Tensor& loss, const at::Tensor& grad_norm);
  // Throws Error naming the first bad step (and `context`, e.g. where the last good checkpoint is).
  void check(const std::string& context) const;

 private:
  at::Tensor first_bad_step_;  // int64 scalar on the device; 0: none
};

}  // namespace finetune
