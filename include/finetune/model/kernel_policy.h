// Which kernels run, decided once when the model is built (from the build, the device, the dtype
// and the model's shape), logged in the banner, and handed to every stage that has a choice:
// the layers (fused RoPE/SwiGLU/RMSNorm), the adapters (half-precision LoRA GEMMs and their split
// kernel), the batch layout (variable-length flash attention) and the optimizer (fused AdamW).
// No function below re-tests the device or dtype to pick a path.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "finetune/config/model_config.h"

namespace finetune {

struct KernelPolicy {
  // RoPE and SwiGLU as fused CUDA kernels with fused backward (model/fused_kernels.h).
  bool fused_elementwise = false;
  // ATen's fused RMSNorm kernel (rounds once where transformers rounds twice).
  bool fused_rms_norm = false;
  // LoRA as one autograd node with the low-rank products inside half-precision GEMMs
  // (lora/half_precision_lora_linear.h); otherwise PEFT's fp32 expression.
  bool half_precision_lora = false;
  // The CUDA kernel that scales, sums and splits the LoRA intermediates (lora/lora_kernels.h).
  bool lora_split_kernel = false;
  // Padding-free batches through variable-length flash attention.
  bool variable_length_attention = false;
  // One multi-tensor fused AdamW launch (ATen's _fused_adamw_) instead of the per-tensor formula.
  bool fused_adamw = false;

  // One line for the banner, e.g. "fused RoPE/SwiGLU, fused RMSNorm, ...".
  std::string describe() const;
};

// The CPU, fp32 and builds without CUDA kernels get PEFT's and transformers' exact expressions;
// a CUDA device in bf16/fp16 gets every fused path this build has.
KernelPolicy choose_kernel_policy(const at::Device& device, at::ScalarType dtype, const ModelConfig& config);

// Whether this build compiled the CUDA kernels (src/*/cuda/*.cu).
bool cuda_kernels_compiled_in();

}  // namespace finetune
