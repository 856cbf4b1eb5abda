#include "finetune/lora/half_precision_lora_linear.h"

#include <typeinfo>

#include <torch/csrc/autograd/custom_function.h>

#include "finetune/lora/lora_kernels.h"
#include "finetune/model/device_selection.h"
#include "finetune/model/fused_kernels.h"
#include "finetune/model/half_gemm.h"

namespace finetune {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Note [Split fp32 operands]
// An fp32 tensor t is t_hi + t_lo with t_hi = half(t), t_lo = half(t - t_hi), to about 2^-17
// relative. A product with a half-precision operand m runs as one GEMM over [t_hi, t_lo] (twice
// the rank: still a skinny product, bound by reading m) and the two r-wide halves of its fp32
// result are summed. The products that form the adapter gradients (x A^T for dB, dy B for dA, and
// those two intermediates against dy and x) go this way, so the gradients keep about fp32
// accuracy although every GEMM reads half-precision operands.

// Note [Operands split per use]
// With LoraAdapter::cache_operands off, the [hi, lo] split of lora_A and lora_B is made inside
// each forward that reads it (one split_hi_lo_into of both: one small kernel on CUDA, its two jobs
// passed as kernel arguments, so a CUDA graph captures it) into memory of its own, which the node
// saves for its backward. Under gradient checkpointing the first
// forward's split is freed with the layer and the recompute splits again, so the splits of at most
// the layers being back-propagated are alive, instead of every adapter's for the whole step (0.16
// GiB on Qwen3-8B at r 16, alive at the LM head, where the step's peak is). The cost: each
// adapter's weights read (fp32) and written (half, twice) once per forward and once per recompute,
// ~0.7 GB on that model per micro-step, and 2 x 252 small kernels there instead of one refresh per
// optimizer step. The values are split_hi_lo's either way (split_hi_lo_into), so results do not change.
std::shared_ptr<const HalfPrecisionOperands> operands_split_now(const LoraAdapter& adapter, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  auto operands = std::make_shared<HalfPrecisionOperands>();
  operands->dtype = dtype;
  const auto A = adapter.lora_A.detach().contiguous();  // (r, in)
  const auto B = adapter.lora_B.detach().contiguous();  // (out, r)
  operands->A_split = at::empty({2 * A.size(0), A.size(1)}, A.options().dtype(dtype));
  operands->B_split = at::empty({B.size(0), 2 * B.size(1)}, B.options().dtype(dtype));
  split_hi_lo_into({{A, operands->A_split, 0}, {B, operands->B_split, 1}}, adapter.kernels.lora_split_kernel);
  return operands;
}

// The operands a forward reads: the adapter's cache, or a split of its own (Note [Operands split per use]).
std::shared_ptr<const HalfPrecisionOperands> operands_for_forward(const LoraAdapter& adapter, at::ScalarType dtype) {
  if (adapter.cache_operands) return half_precision_operands(adapter, dtype);
  return operands_split_now(adapter, dtype);
}

// The forward's products on rows (N, in): y = rows W^T + bias + (scaling rows A^T) B^T (N, out),
// and u_split = split(scaling rows A^T) (N, 2r), which the backward reads for lora_B's gradient.
struct LoraProducts {
  at::Tensor y;
  at::Tensor u_split;
};

LoraProducts lora_products(const at::Tensor& rows, const Linear& base, const LoraAdapter& adapter,
                           const HalfPrecisionOperands& operands) {
  // A 4-bit base weight is dequantized here and again in backward, never kept (linear.h).
  const auto weight = base.dense_weight();
  const auto& bias = base.bias;
  const int64_t r = adapter.lora_A.size(0);
  auto y = bias.defined() ? at::addmm(bias, rows, weight.t()) : at::mm(rows, weight.t());  // (N, out)
  // u = scaling x A^T (N, r), split into [hi, lo] (N, 2r).
  const bool fp32_output_gemm = adapter.kernels.half_gemm_fp32_output;
  auto u_split = scaled_sum_split(matmul_to_float(rows, operands.A_split.t(), fp32_output_gemm), adapter.scaling,
                                  rows.scalar_type(), adapter.kernels.lora_split_kernel);
  // y += u B^T, accumulated by the GEMM: the sum is rounded once.
  y.addmm_(u_split.narrow(1, 0, r), operands.B_split.narrow(1, 0, r).t());
  return {y, u_split};
}

// What the backward needs besides its saved tensors (kept in the context's saved_data).
void save_settings(AutogradContext* ctx, const Linear* base, const LoraAdapter* adapter) {
  ctx->saved_data["base"] = reinterpret_cast<int64_t>(base);
  ctx->saved_data["scaling"] = adapter->scaling;
  ctx->saved_data["split_kernel"] = adapter->kernels.lora_split_kernel;
  ctx->saved_data["fp32_output_gemm"] = adapter->kernels.half_gemm_fp32_output;
}

// The base projection save_settings kept.
const Linear& saved_base(AutogradContext* ctx) {
  return *reinterpret_cast<const Linear*>(ctx->saved_data["base"].toInt());
}

// The backward's products from dy (N, out), in the forward's context: g_split = split(scaling dy B)
// (N, 2r), the gradient reaching x A^T, and the adapter gradients of those that need one.
struct LoraGradients {
  at::Tensor g_split;
  at::Tensor d_lora_A;  // g^T x (r, in)
  at::Tensor d_lora_B;  // dy^T u (out, r)
};

at::Tensor g_split_of(AutogradContext* ctx, const at::Tensor& dy, const at::Tensor& B_split) {
  return scaled_sum_split(matmul_to_float(dy, B_split, ctx->saved_data["fp32_output_gemm"].toBool()),
                          ctx->saved_data["scaling"].toDouble(), dy.scalar_type(),
                          ctx->saved_data["split_kernel"].toBool());
}

LoraGradients lora_gradients(AutogradContext* ctx, const at::Tensor& dy, const at::Tensor& rows,
                             const at::Tensor& u_split, const at::Tensor& B_split, int lora_A_input) {
  const bool fp32_output_gemm = ctx->saved_data["fp32_output_gemm"].toBool();
  LoraGradients gradients;
  gradients.g_split = g_split_of(ctx, dy, B_split);
  if (ctx->needs_input_grad(lora_A_input)) {
    gradients.d_lora_A = sum_halves(matmul_to_float(gradients.g_split.t(), rows, fp32_output_gemm), 0);
  }
  if (ctx->needs_input_grad(lora_A_input + 1)) {
    gradients.d_lora_B = sum_halves(matmul_to_float(dy.t(), u_split, fp32_output_gemm), 1);
  }
  return gradients;
}

// dx = dy W + g A (N, in) into `out` (N, in): the base's input gradient plus the adapter's.
void input_gradient_into(at::Tensor out, const at::Tensor& dy, const Linear& base, const at::Tensor& g_split,
                         const at::Tensor& A_split) {
  const int64_t r = A_split.size(0) / 2;
  at::mm_out(out, dy, base.dense_weight());
  out.addmm_(g_split.narrow(1, 0, r), A_split.narrow(0, 0, r));  // += g A
}

std::vector<int64_t> with_last_size(at::IntArrayRef sizes, int64_t last) {
  auto out = sizes.vec();
  out.back() = last;
  return out;
}

struct HalfPrecisionLoraLinear : public torch::autograd::Function<HalfPrecisionLoraLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& lora_A,
                            const at::Tensor& lora_B, const Linear* base, const LoraAdapter* adapter) {
    const auto operands = operands_for_forward(*adapter, x.scalar_type());
    auto rows = x.reshape({-1, x.size(-1)});  // (N, in)
    auto products = lora_products(rows, *base, *adapter, *operands);
    ctx->save_for_backward({rows, products.u_split, operands->A_split, operands->B_split});
    save_settings(ctx, base, adapter);
    return products.y.view(with_last_size(x.sizes(), products.y.size(1)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& rows = saved[0];
    const auto& A_split = saved[2];
    const Linear& base = saved_base(ctx);
    const auto& grad = grad_outputs[0];
    auto dy = grad.reshape({-1, grad.size(-1)});  // (N, out)
    auto gradients = lora_gradients(ctx, dy, rows, saved[1], saved[3], /*lora_A_input=*/1);
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      dx = at::empty({dy.size(0), rows.size(1)}, dy.options());
      input_gradient_into(dx, dy, base, gradients.g_split, A_split);
      dx = dx.view(with_last_size(grad.sizes(), rows.size(1)));
    }
    return {dx, gradients.d_lora_A, gradients.d_lora_B, at::Tensor(), at::Tensor()};
  }
};

// Note [SwiGLU into the down projection]
// The down projection of a SwiGLU MLP reads h = silu(gate) * up (N, I), and a LoRA node keeps its
// input for lora_A's gradient: with the SwiGLU node keeping gate and up, the layer held gate, up
// and h until the down projection's backward, which made dh; the SwiGLU's backward then made the
// gradients of gate and up while gate, up and dh were alive: five (N, I) tensors at once, the
// step's peak at the seed setting (five 42 MiB tensors of a 1,792-token micro-batch of Qwen3-8B).
// This node takes gate and up instead of h: its forward forms h in a buffer of its own and frees
// it; its backward forms h again in one buffer, reads it for lora_A's gradient, writes the input
// gradient dh = dy W + g A over it, then the SwiGLU's gradients over gate and up
// (fused_swiglu_backward_in_place): gate, up and one buffer, three at once. Unsloth's LoRA MLP node does the same (unsloth/kernels/fast_lora.py:
// it keeps X, gate and up and writes the gradients over them). Every product and kernel is
// HalfPrecisionLoraLinear's and FusedSwiglu's on the same operands, so the bits are the same
// (tests/cuda/test_lora_swiglu_linear.cpp).
struct HalfPrecisionLoraSwigluLinear : public torch::autograd::Function<HalfPrecisionLoraSwigluLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up,
                            const at::Tensor& lora_A, const at::Tensor& lora_B, const Linear* base,
                            const LoraAdapter* adapter) {
    const auto operands = operands_for_forward(*adapter, gate.scalar_type());
    auto activation = at::empty_like(gate);
    fused_swiglu_into(gate, up, activation);
    auto products = lora_products(activation.view({-1, gate.size(-1)}), *base, *adapter, *operands);
    ctx->save_for_backward({gate, up, products.u_split, operands->A_split, operands->B_split});
    save_settings(ctx, base, adapter);
    return products.y.view(with_last_size(gate.sizes(), products.y.size(1)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    const auto& A_split = saved[3];
    const Linear& base = saved_base(ctx);
    auto dy = grad_outputs[0].reshape({-1, grad_outputs[0].size(-1)});  // (N, out)
    auto buffer = at::empty_like(gate);
    fused_swiglu_into(gate, up, buffer);  // h again
    const auto rows = buffer.view({-1, gate.size(-1)});
    auto gradients = lora_gradients(ctx, dy, rows, saved[2], saved[4], /*lora_A_input=*/2);
    at::Tensor d_gate, d_up;
    if (ctx->needs_input_grad(0) || ctx->needs_input_grad(1)) {
      input_gradient_into(rows, dy, base, gradients.g_split, A_split);  // dh over h, read above
      fused_swiglu_backward_in_place(buffer, gate, up);
      if (ctx->needs_input_grad(0)) d_gate = gate.detach();
      if (ctx->needs_input_grad(1)) d_up = up.detach();
    }
    return {d_gate, d_up, gradients.d_lora_A, gradients.d_lora_B, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

namespace {

// Whether `cached` holds operands of exactly these lora_A / lora_B tensors for `dtype` (possibly
// of older values: compare the versions), so that they can be refreshed in place.
bool operands_of(const std::shared_ptr<const HalfPrecisionOperands>& cached, const at::Tensor& A, const at::Tensor& B,
                 at::ScalarType dtype) {
  return cached && cached->dtype == dtype && cached->lora_A_impl == A.unsafeGetTensorImpl() &&
         cached->lora_B_impl == B.unsafeGetTensorImpl();
}

}  // namespace

std::shared_ptr<const HalfPrecisionOperands> half_precision_operands(const LoraAdapter& adapter, at::ScalarType dtype) {
  const auto& A = adapter.lora_A;
  const auto& B = adapter.lora_B;
  auto cached = adapter.half_precision_operands;
  const bool same_tensors = operands_of(cached, A, B, dtype);
  if (same_tensors && cached->lora_A_version == A._version() && cached->lora_B_version == B._version()) {
    return cached;
  }
  at::NoGradGuard no_grad;
  auto operands = std::make_shared<HalfPrecisionOperands>();
  operands->lora_A_impl = A.unsafeGetTensorImpl();
  operands->lora_B_impl = B.unsafeGetTensorImpl();
  operands->lora_A_version = A._version();
  operands->lora_B_version = B._version();
  operands->dtype = dtype;
  if (same_tensors) {
    // Refreshed in place: a CUDA graph that captured these tensors reads them at their addresses
    // (Note [Graphed micro-steps] in train/micro_step_graphs.h).
    operands->A_split = cached->A_split;
    operands->B_split = cached->B_split;
    operands->A_split.copy_(split_hi_lo(A, dtype, 0));
    operands->B_split.copy_(split_hi_lo(B, dtype, 1));
  } else {
    operands->A_split = split_hi_lo(A, dtype, 0);
    operands->B_split = split_hi_lo(B, dtype, 1);
  }
  adapter.half_precision_operands = operands;
  return operands;
}

void refresh_half_precision_operands(const std::vector<const LoraAdapter*>& adapters, at::ScalarType dtype) {
  std::vector<SplitTarget> targets;
  std::vector<const LoraAdapter*> refreshed;
  for (const LoraAdapter* adapter : adapters) {
    const auto& A = adapter->lora_A;
    const auto& B = adapter->lora_B;
    const auto& cached = adapter->half_precision_operands;
    const bool in_place = operands_of(cached, A, B, dtype) && A.is_contiguous() && B.is_contiguous();
    if (!in_place) {
      half_precision_operands(*adapter, dtype);  // builds the cache
      continue;
    }
    if (cached->lora_A_version == A._version() && cached->lora_B_version == B._version()) continue;
    targets.push_back({A.detach(), cached->A_split, 0});
    targets.push_back({B.detach(), cached->B_split, 1});
    refreshed.push_back(adapter);
  }
  if (targets.empty()) return;
  split_hi_lo_into(targets, refreshed.front()->kernels.lora_split_kernel);
  for (const LoraAdapter* adapter : refreshed) {
    auto operands = std::make_shared<HalfPrecisionOperands>(*adapter->half_precision_operands);
    operands->lora_A_version = adapter->lora_A._version();
    operands->lora_B_version = adapter->lora_B._version();
    adapter->half_precision_operands = operands;
  }
}

void refresh_derived_tensors(const std::vector<const LinearAdapter*>& adapters, at::ScalarType dtype) {
  std::vector<const LoraAdapter*> batched;
  for (const LinearAdapter* adapter : adapters) {
    const auto* lora = dynamic_cast<const LoraAdapter*>(adapter);
    if (lora && typeid(*adapter) == typeid(LoraAdapter) && lora->kernels.half_precision_lora &&
        lora->cache_operands && is_half_precision(dtype)) {
      batched.push_back(lora);
    } else {
      adapter->refresh_derived_tensors(dtype);
    }
  }
  refresh_half_precision_operands(batched, dtype);
}

at::Tensor half_precision_lora_linear(const at::Tensor& x, const Linear& base, const LoraAdapter& adapter) {
  return HalfPrecisionLoraLinear::apply(x, adapter.lora_A, adapter.lora_B, &base, &adapter);
}

at::Tensor half_precision_lora_swiglu_linear(const at::Tensor& gate, const at::Tensor& up, const Linear& base,
                                             const LoraAdapter& adapter) {
  return HalfPrecisionLoraSwigluLinear::apply(gate, up, adapter.lora_A, adapter.lora_B, &base, &adapter);
}

}  // namespace finetune
