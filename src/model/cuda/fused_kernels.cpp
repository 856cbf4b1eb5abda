#include "finetune/model/fused_kernels.h"

#include <string>
#include <vector>

#include <torch/csrc/autograd/custom_function.h>

#include "elementwise_kernels.h"
#include "norm_rope_kernels.h"
#include "finetune/kernels/kernel_launch.h"
#include "finetune/model/swiglu.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using cuda_kernels::check_launch;
using cuda_kernels::current_stream;
using cuda_kernels::half_kind;

// x (B, T, H, D) -> (B, T, H, D); `backward` applies the transposed rotation (the input gradient).
at::Tensor run_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  auto input = x.contiguous();
  auto y = at::empty_like(input);
  const int64_t head_dim = input.size(-1);
  const int64_t heads = input.size(-2);
  const int64_t tokens = input.numel() / (heads * head_dim);
  check_launch(cuda_kernels::rope(half_kind(input), input.data_ptr(), cos.data_ptr(), sin.data_ptr(), y.data_ptr(),
                                  tokens, heads, head_dim, backward, current_stream(input)),
               "rope");
  return y;
}

struct FusedRope : public torch::autograd::Function<FusedRope> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return run_rope(x, cos, sin, /*backward=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    return {run_rope(grad_outputs[0], saved[0], saved[1], /*backward=*/true), at::Tensor(), at::Tensor()};
  }
};

// x (B, T, H, D) contiguous; saves x and the fp32 rstd (B*T*H) for the backward.
struct FusedNormRope : public torch::autograd::Function<FusedNormRope> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos,
                            const at::Tensor& sin, double eps) {
    const int64_t head_dim = x.size(-1);
    const int64_t heads = x.size(-2);
    const int64_t tokens = x.numel() / (heads * head_dim);
    auto y = at::empty_like(x);
    auto rstd = at::empty({tokens * heads}, x.options().dtype(at::kFloat));
    check_launch(cuda_kernels::norm_rope_forward(half_kind(x), x.data_ptr(), weight.data_ptr(), cos.data_ptr(),
                                                 sin.data_ptr(), y.data_ptr(), rstd.data_ptr<float>(), tokens, heads,
                                                 head_dim, static_cast<float>(eps), current_stream(x)),
                 "norm_rope forward");
    ctx->save_for_backward({x, weight, cos, sin, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    auto grad = grad_outputs[0].contiguous();
    auto dx = at::empty_like(x);
    const int64_t head_dim = x.size(-1);
    const int64_t heads = x.size(-2);
    check_launch(cuda_kernels::norm_rope_backward(half_kind(x), grad.data_ptr(), x.data_ptr(), saved[1].data_ptr(),
                                                  saved[2].data_ptr(), saved[3].data_ptr(), saved[4].data_ptr<float>(),
                                                  dx.data_ptr(), x.numel() / (heads * head_dim), heads, head_dim,
                                                  current_stream(x)),
                 "norm_rope backward");
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// out = silu(gate) * up, one kernel, on operands fused_swiglu_supported takes (not checked here).
void run_swiglu_forward(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out) {
  check_launch(cuda_kernels::swiglu_forward(half_kind(gate), gate.data_ptr(), up.data_ptr(), out.data_ptr(),
                                            gate.numel(), current_stream(gate)),
               "swiglu forward");
}

struct FusedSwiglu : public torch::autograd::Function<FusedSwiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
    auto out = at::empty_like(gate);
    run_swiglu_forward(gate, up, out);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    auto grad = grad_outputs[0].contiguous();
    auto d_gate = at::empty_like(gate);
    auto d_up = at::empty_like(up);
    check_launch(cuda_kernels::swiglu_backward(half_kind(gate), grad.data_ptr(), gate.data_ptr(), up.data_ptr(),
                                               d_gate.data_ptr(), d_up.data_ptr(), gate.numel(), current_stream(gate)),
                 "swiglu backward");
    return {d_gate, d_up};
  }
};

// gate_up (M, 2I), read in place; saved as it is (no copies of the halves) for the backward,
// which returns its gradient as one contiguous (M, 2I) tensor.
struct FusedSwigluGateUp : public torch::autograd::Function<FusedSwigluGateUp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, int64_t width) {
    ctx->save_for_backward({gate_up});
    const int64_t rows = gate_up.size(0);
    auto out = at::empty({rows, width}, gate_up.options());  // (M, I)
    check_launch(cuda_kernels::swiglu_gate_up_forward(half_kind(gate_up), gate_up.data_ptr(), out.data_ptr(), rows,
                                                      width, gate_up.stride(0), current_stream(gate_up)),
                 "swiglu gate_up forward");
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto gate_up = ctx->get_saved_variables()[0];
    const int64_t rows = gate_up.size(0);
    const int64_t width = gate_up.size(1) / 2;
    auto grad = grad_outputs[0].contiguous();                          // (M, I)
    auto d_gate_up = at::empty({rows, 2 * width}, gate_up.options());  // (M, 2I)
    check_launch(cuda_kernels::swiglu_gate_up_backward(half_kind(gate_up), grad.data_ptr(), gate_up.data_ptr(),
                                                       d_gate_up.data_ptr(), rows, width, gate_up.stride(0),
                                                       current_stream(gate_up)),
                 "swiglu gate_up backward");
    return {d_gate_up, at::Tensor()};
  }
};

// The element types the SwiGLU kernels run.
bool swiglu_dtype(at::ScalarType dtype) {
  return dtype == at::kBFloat16 || dtype == at::kHalf || dtype == at::kFloat;
}

// Throws naming `caller` unless fused_swiglu_supported takes the first tensor with each other one.
void check_swiglu_operands(const std::vector<at::Tensor>& tensors, const std::string& caller) {
  const at::Tensor& gate = tensors.front();
  for (const auto& t : tensors) {
    if (!fused_swiglu_supported(gate, t)) {
      throw Error(caller + ": expected contiguous CUDA tensors of one shape and dtype, bf16, fp16 or fp32, got " +
                  c10::toString(t.scalar_type()) + " on " + t.device().str() + " beside " +
                  c10::toString(gate.scalar_type()) + " on " + gate.device().str());
    }
  }
}

}  // namespace

at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t head_dim = x.size(-1);
  if (x.dim() != 4 || head_dim % 2 != 0 || cos.scalar_type() != x.scalar_type() || !cos.is_contiguous() ||
      !sin.is_contiguous() || cos.numel() != x.size(0) * x.size(1) * head_dim || sin.sizes() != cos.sizes()) {
    throw Error("fused_rope: expected x (B, T, H, D) and contiguous cos/sin (B, T, D) of x's dtype");
  }
  return FusedRope::apply(x, cos, sin);
}

bool fused_norm_rope_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos) {
  const auto dtype = x.scalar_type();
  return x.is_cuda() && x.dim() == 4 && (dtype == at::kBFloat16 || dtype == at::kHalf) &&
         cuda_kernels::norm_rope_head_dim_supported(x.size(-1)) && !weight.requires_grad() &&
         weight.scalar_type() == dtype && weight.dim() == 1 && weight.size(0) == x.size(-1) &&
         cos.scalar_type() == dtype && cos.size(-1) == x.size(-1);
}

at::Tensor fused_norm_rope(const at::Tensor& x, const at::Tensor& weight, double eps, const at::Tensor& cos,
                           const at::Tensor& sin) {
  if (!fused_norm_rope_supported(x, weight, cos) || !cos.is_contiguous() || !sin.is_contiguous() ||
      sin.sizes() != cos.sizes() || cos.numel() != x.size(0) * x.size(1) * x.size(-1)) {
    throw Error("fused_norm_rope: expected x (B, T, H, D) of bf16 or fp16 with D 64, 128 or 256, a frozen weight (D) "
                "and contiguous cos/sin (B, T, D) of x's dtype");
  }
  return FusedNormRope::apply(x.contiguous(), weight.contiguous(), cos, sin, eps);
}

bool fused_swiglu_supported(const at::Tensor& gate, const at::Tensor& up) {
  return gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type() && gate.is_contiguous() &&
         up.is_contiguous() && gate.is_cuda() && up.is_cuda() && swiglu_dtype(gate.scalar_type());
}

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) {
  check_swiglu_operands({gate, up}, "fused_swiglu");
  return FusedSwiglu::apply(gate, up);
}

void fused_swiglu_into(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out) {
  check_swiglu_operands({gate, up, out}, "fused_swiglu_into");
  run_swiglu_forward(gate, up, out);
}

void fused_swiglu_backward_in_place(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up) {
  check_swiglu_operands({gate, up, grad}, "fused_swiglu_backward_in_place");
  check_launch(cuda_kernels::swiglu_backward_in_place(half_kind(gate), grad.data_ptr(), gate.data_ptr(),
                                                      up.data_ptr(), gate.numel(), current_stream(gate)),
               "swiglu backward in place");
}

at::Tensor fused_swiglu_gate_up(const at::Tensor& gate_up, int64_t width) {
  check_gate_up_layout(gate_up, width, "fused_swiglu_gate_up");
  if (!gate_up.is_cuda() || !swiglu_dtype(gate_up.scalar_type())) {
    throw Error(std::string("fused_swiglu_gate_up: expected a CUDA gate_up of bf16, fp16 or fp32, got ") +
                c10::toString(gate_up.scalar_type()) + " on " + gate_up.device().str());
  }
  return FusedSwigluGateUp::apply(gate_up, width);
}

}  // namespace finetune
