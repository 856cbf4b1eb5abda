// The GEMMs of one expert stack over rows sorted by expert (Note [Grouped expert GEMMs] in
// moe_block.h): rows_e W_e^T for every expert e at once, either one at::_grouped_mm or one GEMM
// per expert that received rows, and the base product of a 4-bit stack (Note [4-bit expert
// stacks]) as one autograd node that dequantizes the stack for the forward GEMM and again for the
// backward one, as bitsandbytes' MatMul4Bit does for a Linear4bit.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

struct ExpertStack;  // moe_block.h

// How the rows reach their experts: grouped (offsets: (E) int32 cumulative row counts on the rows'
// device, no host sync) or one GEMM per expert (counts: rows per expert, on the host).
struct ExpertGemmPlan {
  bool grouped = false;
  at::Tensor offsets;
  std::vector<int64_t> counts;
};

// Whether at::_grouped_mm runs bf16 on `device` without a host sync: its CUTLASS kernels (compute
// capability 9.x and 10.x) read the offsets on the device; elsewhere ATen's fallback copies them to
// the host. False for the CPU and in builds without CUDA (model/cuda/grouped_gemm_support.cpp).
bool grouped_gemms_sync_free(const at::Device& device);

// rows (M, in) sorted by expert, weight (E, out, in) -> rows_e weight_e^T (M, out).
at::Tensor experts_gemm(const at::Tensor& weight, const at::Tensor& rows, const ExpertGemmPlan& plan);

// dy (M, out) sorted by expert, weight (E, out, in) -> dy_e weight_e (M, in): the rows' gradient.
at::Tensor experts_gemm_input_grad(const at::Tensor& weight, const at::Tensor& dy, const ExpertGemmPlan& plan);

// experts_gemm(stack's base weight, rows, plan) for a 4-bit stack, differentiable in `rows` only;
// the weight is dequantized to rows' dtype in forward and again in backward. `stack` must outlive
// the backward pass (it is the model's own).
at::Tensor experts_gemm_4bit(const ExpertStack& stack, const at::Tensor& rows, const ExpertGemmPlan& plan);

}  // namespace finetune
