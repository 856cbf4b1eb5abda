#include "finetune/model/swiglu.h"

#include <sstream>

#include "finetune/model/fused_kernels.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

at::Tensor aten_swiglu(const at::Tensor& gate, const at::Tensor& up) { return at::silu(gate) * up; }

std::string sizes_text(const at::Tensor& t) {
  std::ostringstream text;
  text << t.sizes();
  return text.str();
}

}  // namespace

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, const KernelPolicy& kernels) {
  return kernels.fused_elementwise ? fused_swiglu(gate, up) : aten_swiglu(gate, up);
}

at::Tensor swiglu_gate_up(const at::Tensor& gate_up, int64_t width, const KernelPolicy& kernels) {
  check_gate_up_layout(gate_up, width, "swiglu_gate_up");
  if (kernels.fused_elementwise && gate_up.is_cuda()) return fused_swiglu_gate_up(gate_up, width);
  return aten_swiglu(gate_up.narrow(1, 0, width), gate_up.narrow(1, width, width));  // (M, width)
}

void check_gate_up_layout(const at::Tensor& gate_up, int64_t width, const std::string& caller) {
  if (gate_up.dim() != 2) {
    throw Error(caller + ": gate_up must be 2-D (M, 2 * width), got sizes " + sizes_text(gate_up));
  }
  if (width <= 0) throw Error(caller + ": width must be positive, got " + std::to_string(width));
  if (gate_up.size(1) != 2 * width) {
    throw Error(caller + ": gate_up's last dimension must be 2 * width = " + std::to_string(2 * width) + ", got " +
                std::to_string(gate_up.size(1)) + " (sizes " + sizes_text(gate_up) + ")");
  }
  if (gate_up.stride(1) != 1) {
    throw Error(caller + ": gate_up's last dimension must have stride 1 (gate and up are read in place), got stride " +
                std::to_string(gate_up.stride(1)));
  }
}

}  // namespace finetune
