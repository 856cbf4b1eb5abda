#include "finetune/train/grad_clip.h"

namespace finetune {

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return at::zeros({});
  auto norms = at::_foreach_norm(grads, 2);
  auto total = at::linalg_vector_norm(at::stack(norms), 2);
  if (max_norm <= 0) return total;
  auto clip_coef = ((total + 1e-6).reciprocal() * max_norm).clamp_max(1.0);  // Python: max_norm / (total + 1e-6)
  at::_foreach_mul_(grads, clip_coef);
  return total;
}

}  // namespace finetune
