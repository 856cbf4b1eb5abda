// Which kernels run, decided once when the model is built (from the build, the device, the dtype
// and the model's shape), logged in the banner (describe()), and handed to every stage that has a
// choice: the layers (fused RoPE/SwiGLU/RMSNorm, the attention kernel), the adapters
// (half-precision LoRA GEMMs, their fp32-output GEMMs and split kernel), the batch layout
// (padding-free batches), CUDA graphs and the optimizer (fused AdamW). model/ and lora/ choose
// their paths from this policy and never test the device themselves; train/ reads the batch layout
// (padding_free_batches) and CUDA graphs (cuda_graphs) from it too.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/model/head_group_attention.h"

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
  // GEMMs of bf16/fp16 operands return their fp32 accumulator directly (cuBLAS, at::mm with an
  // fp32 out_dtype); otherwise the operands are widened to fp32 (exactly) and multiplied in fp32.
  // Read by the half-precision LoRA node (lora/half_precision_lora_linear.h).
  bool half_gemm_fp32_output = false;
  // Flash attention is available for this model: variable-length (cu_seqlens) in training and
  // evaluation, and the mask-free KV-cache decode in generation (model/causal_lm.cpp).
  bool variable_length_attention = false;
  // Training and evaluation batches are laid out padding-free: every sample of a micro-batch in
  // one row, bounded by cu_seqlens (model/attention_mask.h), for the variable-length kernel. Set
  // with variable_length_attention today; its own field so the batch layout is not read off the
  // attention kernel (a family whose attention the kernel cannot compute keeps padded batches).
  bool padding_free_batches = false;
  // The model soft-caps attention logits (Gemma-2): attention is transformers' eager expression,
  // per sample in padding-free batches (model/attention_kernels.h), and flash attention is off.
  bool softcapped_attention = false;
  // Micro-steps may be captured and replayed as CUDA graphs (train/micro_step_graphs.h): a CUDA
  // device with padding-free batches, in a build with the CUDA code. Whether this model's adapters and base weights allow it
  // is CausalLM::cuda_graph_safe().
  bool cuda_graphs = false;
  // The kernel of long rows' head-grouped attention (Note [Head-grouped cuDNN attention]): cuDNN
  // where flash attention is on, unless FINETUNE_LONG_ROW_ATTENTION=flash asks for flash; the
  // attention kernel then gives cuDNN only the rows of one sample without a window and below
  // kCudnnMaxQueryElements (head_group_kernel_for), and flash the rest.
  HeadGroupKernel long_row_attention = HeadGroupKernel::kFlash;
  // One multi-tensor fused AdamW launch (ATen's _fused_adamw_) instead of the per-tensor formula.
  bool fused_adamw = false;
  // The per-head query and key RMSNorm (Qwen3's q_norm, k_norm) and RoPE as one fused CUDA kernel
  // each way (fused_norm_rope, model/fused_kernels.h), in architectures with those norms where the
  // fused RoPE and RMSNorm are on, unless FINETUNE_NORM_ROPE_KERNEL=aten asks for ATen's RMSNorm,
  // then the fused RoPE.
  bool fused_norm_rope = false;

  // One line for the banner, e.g. "fused RoPE/SwiGLU, fused RMSNorm, ...".
  std::string describe() const;
};

// What the environment asks of the kernels: long rows' attention (FINETUNE_LONG_ROW_ATTENTION,
// requested_long_row_attention) and the fused q/k norm + RoPE (FINETUNE_NORM_ROPE_KERNEL,
// requested_norm_rope_kernel).
struct KernelRequests {
  HeadGroupKernel long_row_attention = kDefaultHeadGroupKernel;
  bool fused_norm_rope = true;
};

// The CPU, fp32 and builds without CUDA kernels get PEFT's and transformers' exact expressions;
// a CUDA device in bf16/fp16 gets every fused path this build has, and those `requests` asks for.
KernelPolicy choose_kernel_policy(const at::Device& device, at::ScalarType dtype, const ModelConfig& config,
                                  const KernelRequests& requests = {});

// The environment variable that asks for long rows' attention kernel, and the kernel its value
// asks for: unset or "" kDefaultHeadGroupKernel, else a head_group_kernel_name ("flash", "cudnn"); a
// UsageError naming them for any other value.
inline constexpr const char* kLongRowAttentionVariable = "FINETUNE_LONG_ROW_ATTENTION";
HeadGroupKernel requested_long_row_attention(const std::string& value);

// The environment variable that asks for the fused q/k norm + RoPE kernel, and whether its value
// does: unset, "" or "fused" yes, "aten" no; a UsageError naming them for any other value.
inline constexpr const char* kNormRopeKernelVariable = "FINETUNE_NORM_ROPE_KERNEL";
bool requested_norm_rope_kernel(const std::string& value);

// Whether this build compiled the CUDA kernels (src/*/cuda/*.cu).
bool cuda_kernels_compiled_in();

}  // namespace finetune
