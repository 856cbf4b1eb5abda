// fused_gathered_row_sum and fused_combine_backward (model/expert_dispatch.h) in CUDA builds: the
// checks and allocations around the launchers of expert_dispatch_kernels.cu.
#include "finetune/model/expert_dispatch.h"

#include "expert_dispatch_kernels.h"
#include "finetune/kernels/kernel_launch.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using cuda_kernels::check_launch;
using cuda_kernels::current_stream;
using cuda_kernels::half_kind;

bool is_half(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf; }

// Rows of a half type on a CUDA device; weights (when given) fp32 or the rows' type, on that device.
void check_operands(const char* what, const at::Tensor& rows, const at::Tensor& weights) {
  if (!rows.is_cuda() || !is_half(rows) || rows.dim() != 2) {
    throw Error(std::string(what) + ": expected bf16/fp16 rows (R, C) on a CUDA device, got " +
                std::string(c10::toString(rows.scalar_type())) + " on " + rows.device().str());
  }
  if (weights.defined() && (weights.device() != rows.device() ||
                            (weights.scalar_type() != at::kFloat && weights.scalar_type() != rows.scalar_type()))) {
    throw Error(std::string(what) + ": expected weights in fp32 or the rows' dtype, on the rows' device");
  }
}

void check_index(const char* what, const at::Tensor& index, const at::Tensor& rows, int64_t count) {
  if (index.scalar_type() != at::kLong || index.device() != rows.device() || index.numel() != count) {
    throw Error(std::string(what) + ": expected " + std::to_string(count) + " int64 indices on the rows' device");
  }
}

}  // namespace

at::Tensor fused_gathered_row_sum(const at::Tensor& src, const at::Tensor& index, const at::Tensor& weights,
                                  int64_t rows, int64_t top_k) {
  check_operands("fused_gathered_row_sum", src, weights);
  check_index("fused_gathered_row_sum", index, src, rows * top_k);
  if (weights.defined() && weights.numel() != rows * top_k) {
    throw Error("fused_gathered_row_sum: expected " + std::to_string(rows * top_k) + " weights");
  }
  const auto source = src.contiguous();
  const auto indices = index.contiguous();
  const auto scale = weights.defined() ? weights.contiguous() : weights;
  auto out = at::empty({rows, source.size(1)}, source.options());  // (rows, C)
  check_launch(cuda_kernels::gathered_row_sum(half_kind(source), !scale.defined() || scale.scalar_type() == at::kFloat,
                                              source.data_ptr(), indices.data_ptr<int64_t>(),
                                              scale.defined() ? scale.data_ptr() : nullptr, out.data_ptr(), rows,
                                              top_k, source.size(1), current_stream(source)),
               "gathered row sum");
  return out;
}

std::pair<at::Tensor, at::Tensor> fused_combine_backward(const at::Tensor& grad, const at::Tensor& outputs,
                                                         const at::Tensor& weights, const ExpertDispatch& dispatch,
                                                         bool outputs_grad, bool weights_grad) {
  check_operands("fused_combine_backward", outputs, weights);
  const int64_t rows = outputs.size(0);
  check_index("fused_combine_backward", dispatch.tokens, outputs, rows);
  check_index("fused_combine_backward", dispatch.order, outputs, rows);
  if (grad.scalar_type() != outputs.scalar_type() || grad.device() != outputs.device() || grad.dim() != 2 || grad.size(1) != outputs.size(1) ||
      weights.numel() != rows) {
    throw Error("fused_combine_backward: expected grad (N, C) of the outputs' dtype and device, and N*k weights");
  }
  const auto grad_rows = grad.contiguous();
  const auto expert_outputs = outputs.contiguous();
  const auto scale = weights.contiguous();
  at::Tensor d_outputs = outputs_grad ? at::empty_like(expert_outputs) : at::Tensor();  // (N*k, C)
  at::Tensor d_weights = weights_grad ? at::empty_like(scale) : at::Tensor();           // (N, k)
  check_launch(cuda_kernels::combine_backward(half_kind(expert_outputs), scale.scalar_type() == at::kFloat,
                                              grad_rows.data_ptr(), expert_outputs.data_ptr(), scale.data_ptr(),
                                              dispatch.tokens.contiguous().data_ptr<int64_t>(),
                                              dispatch.order.contiguous().data_ptr<int64_t>(),
                                              outputs_grad ? d_outputs.data_ptr() : nullptr,
                                              weights_grad ? d_weights.data_ptr() : nullptr, rows,
                                              expert_outputs.size(1), current_stream(expert_outputs)),
               "combine backward");
  return {d_outputs, d_weights};
}

}  // namespace finetune
