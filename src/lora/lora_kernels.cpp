#include "finetune/lora/lora_kernels.h"

#include <algorithm>
#include <cstring>

#include "finetune/util/errors.h"

#ifdef FINETUNE_WITH_CUDA
#include "finetune/kernels/kernel_launch.h"
#include "cuda/lora_split_kernel.h"
#endif

namespace finetune {

at::Tensor split_hi_lo(const at::Tensor& t, at::ScalarType dtype, int64_t dim) {
  auto hi = t.to(dtype);
  return at::cat({hi, (t - hi).to(dtype)}, dim);  // t - hi is formed in fp32
}

namespace {

void check_split_target(const SplitTarget& target) {
  const auto& t = target.source;
  auto want = t.sizes().vec();
  if (t.dim() == 2 && (target.dim == 0 || target.dim == 1)) want[static_cast<size_t>(target.dim)] *= 2;
  if (t.dim() != 2 || t.scalar_type() != at::kFloat || !t.is_contiguous() || !target.out.is_contiguous() ||
      target.out.sizes().vec() != want || (target.dim != 0 && target.dim != 1)) {
    throw Error("split_hi_lo_into: needs a contiguous fp32 matrix and a contiguous output of twice its size along "
                "dim 0 or 1, got " + t.toString() + " " + std::to_string(t.dim()) + "-D into " + target.out.toString());
  }
}

#ifdef FINETUNE_WITH_CUDA
// All targets in one launch: up to kSplitJobsByValue jobs as the kernel's arguments (capturable:
// Note [Operands split per use] in half_precision_lora_linear.cpp), more in one copy to the device.
void split_hi_lo_into_cuda(const std::vector<SplitTarget>& targets) {
  const auto& first = targets.front().out;
  std::vector<cuda_kernels::SplitOperandJob> jobs;
  int64_t max_elements = 0;
  for (const auto& target : targets) {
    if (target.out.device() != first.device() || target.out.scalar_type() != first.scalar_type() ||
        target.source.device() != first.device()) {
      throw Error("split_hi_lo_into: the CUDA kernel takes targets on one device and of one dtype");
    }
    jobs.push_back({target.source.data_ptr<float>(), target.out.data_ptr(), target.source.size(0),
                    target.source.size(1), target.dim});
    max_elements = std::max(max_elements, target.source.numel());
  }
  const auto count = static_cast<int64_t>(jobs.size());
  if (count <= cuda_kernels::kSplitJobsByValue) {
    cuda_kernels::check_launch(cuda_kernels::lora_split_operands_by_value(jobs.data(), count, max_elements,
                                                                           cuda_kernels::half_kind(first),
                                                                           cuda_kernels::current_stream(first)),
                               "lora_split_operands_by_value");
    return;
  }
  const auto bytes = static_cast<int64_t>(jobs.size() * sizeof(cuda_kernels::SplitOperandJob));
  auto host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), jobs.data(), static_cast<size_t>(bytes));
  const auto device_jobs = host.to(first.device(), /*non_blocking=*/true);
  cuda_kernels::check_launch(
      cuda_kernels::lora_split_operands(static_cast<const cuda_kernels::SplitOperandJob*>(device_jobs.data_ptr()),
                                        static_cast<int64_t>(jobs.size()), max_elements,
                                        cuda_kernels::half_kind(first), cuda_kernels::current_stream(first)),
      "lora_split_operands");
}
#endif

}  // namespace

void split_hi_lo_into(const std::vector<SplitTarget>& targets, bool cuda_kernel) {
  if (targets.empty()) return;
  for (const auto& target : targets) check_split_target(target);
#ifdef FINETUNE_WITH_CUDA
  if (cuda_kernel && targets.front().out.is_cuda()) {
    split_hi_lo_into_cuda(targets);
    return;
  }
#endif
  at::NoGradGuard no_grad;
  for (const auto& target : targets) {
    target.out.copy_(split_hi_lo(target.source, target.out.scalar_type(), target.dim));
  }
}

at::Tensor sum_halves(const at::Tensor& product, int64_t dim) {
  const int64_t half = product.size(dim) / 2;
  return product.narrow(dim, 0, half) + product.narrow(dim, half, half);
}

at::Tensor scaled_sum_split(const at::Tensor& product, double scaling, at::ScalarType dtype, bool cuda_kernel) {
  if (cuda_kernel) {
#ifdef FINETUNE_WITH_CUDA
    if (!product.is_cuda() || product.scalar_type() != at::kFloat) {
      throw Error("scaled_sum_split: the CUDA kernel takes an fp32 CUDA product, got " + product.toString());
    }
    const auto input = product.contiguous();
    auto out = at::empty(product.sizes(), product.options().dtype(dtype));
    cuda_kernels::check_launch(
        cuda_kernels::lora_scaled_sum_split(input.data_ptr<float>(), out.data_ptr(), input.size(0),
                                            input.size(1) / 2, static_cast<float>(scaling),
                                            cuda_kernels::half_kind(out), cuda_kernels::current_stream(input)),
        "lora_scaled_sum_split");
    return out;
#else
    throw Error("scaled_sum_split: this build has no CUDA kernels");
#endif
  }
  return split_hi_lo(sum_halves(product, 1) * scaling, dtype, 1);
}

}  // namespace finetune
