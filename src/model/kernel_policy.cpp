#include "finetune/model/kernel_policy.h"

#include "finetune/model/device_selection.h"

namespace finetune {

bool cuda_kernels_compiled_in() {
#ifdef FINETUNE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

KernelPolicy choose_kernel_policy(const at::Device& device, at::ScalarType dtype, const ModelConfig& config) {
  KernelPolicy policy;
  const bool cuda = device.is_cuda();
  const bool cuda_half = cuda && is_half_precision(dtype);
  policy.fused_elementwise = cuda_half && cuda_kernels_compiled_in();
  policy.fused_rms_norm = cuda_half;
  policy.half_precision_lora = cuda_half;
  policy.lora_split_kernel = cuda_half && cuda_kernels_compiled_in();
  policy.half_gemm_fp32_output = cuda_half;
  // Flash attention: fp16/bf16 on CUDA, head_dim a multiple of 8 up to 256.
  policy.variable_length_attention = cuda_half && config.head_dim % 8 == 0 && config.head_dim <= 256;
  policy.padding_free_batches = policy.variable_length_attention;
  policy.cuda_graphs = cuda && policy.padding_free_batches && cuda_kernels_compiled_in();
  policy.fused_adamw = cuda;
  return policy;
}

std::string KernelPolicy::describe() const {
  std::string out;
  auto add = [&out](bool on, const char* fused, const char* plain) {
    out += (out.empty() ? "" : ", ") + std::string(on ? fused : plain);
  };
  add(fused_elementwise, "fused RoPE/SwiGLU", "ATen RoPE/SwiGLU");
  add(fused_rms_norm, "fused RMSNorm", "HF RMSNorm");
  add(half_precision_lora, lora_split_kernel ? "half-precision LoRA GEMMs (CUDA split kernel)" : "half-precision LoRA GEMMs",
      "PEFT fp32 LoRA");
  add(variable_length_attention, "padding-free flash attention", "padded SDPA attention");
  add(fused_adamw, "fused AdamW", "per-tensor AdamW");
  return out;
}

}  // namespace finetune
