#include "finetune/model/kernel_policy.h"

#include "finetune/model/architecture.h"
#include "finetune/model/device_selection.h"
#include "finetune/util/errors.h"

namespace finetune {

bool cuda_kernels_compiled_in() {
#ifdef FINETUNE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

KernelPolicy choose_kernel_policy(const at::Device& device, at::ScalarType dtype, const ModelConfig& config,
                                  const KernelRequests& requests) {
  KernelPolicy policy;
  const bool cuda = device.is_cuda();
  const bool cuda_half = cuda && is_half_precision(dtype);
  policy.fused_elementwise = cuda_half && cuda_kernels_compiled_in();
  // ATen's fused kernel scales by w; Gemma's norms scale by (1 + w) in fp32 and run as transformers writes them.
  const Architecture* architecture = find_architecture_by_class(config.architecture);
  policy.fused_rms_norm = cuda_half && !(architecture && architecture->rms_norm_unit_offset);
  policy.half_precision_lora = cuda_half;
  policy.lora_split_kernel = cuda_half && cuda_kernels_compiled_in();
  policy.half_gemm_fp32_output = cuda_half;
  // Flash attention: fp16/bf16 on CUDA, head_dim a multiple of 8 up to 256. It takes no logit
  // soft-cap: soft-capped models keep padding-free batches with eager attention over batched
  // chunks of the row's samples (Note [Batched packed attention] in attention_kernels.h), whose
  // plan is made on the host from each row's lengths, which a CUDA graph cannot replay.
  const bool flash_shape = cuda_half && config.head_dim % 8 == 0 && config.head_dim <= 256;
  policy.softcapped_attention = config.attn_logit_softcapping.has_value();
  policy.variable_length_attention = flash_shape && !policy.softcapped_attention;
  policy.padding_free_batches = flash_shape;
  // cuDNN replaces the flash groups (Note [Head-grouped cuDNN attention]); without them it has nothing to replace.
  policy.long_row_attention =
      policy.variable_length_attention ? requests.long_row_attention : HeadGroupKernel::kFlash;
  policy.cuda_graphs = cuda && policy.padding_free_batches && cuda_kernels_compiled_in() && !policy.softcapped_attention;
  policy.fused_adamw = cuda;
  policy.fused_norm_rope = requests.fused_norm_rope && policy.fused_elementwise && policy.fused_rms_norm &&
                           architecture && has_role(*architecture, ModuleRole::kQueryNorm);  // Qwen3's q_norm
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
  if (softcapped_attention) {
    add(padding_free_batches, "padding-free eager soft-capped attention (batched samples)", "padded eager soft-capped attention");
  } else {
    add(variable_length_attention, "padding-free flash attention", "padded SDPA attention");
  }
  if (variable_length_attention) {
    out += std::string(", long single-sample rows: ") +
           (long_row_attention == HeadGroupKernel::kCudnn ? "cuDNN" : "flash") + " attention per KV head (" +
           kLongRowAttentionVariable + ")";
  }
  add(fused_adamw, "fused AdamW", "per-tensor AdamW");
  if (fused_norm_rope) out += std::string(", fused q/k RMSNorm + RoPE (") + kNormRopeKernelVariable + ")";
  return out;
}

HeadGroupKernel requested_long_row_attention(const std::string& value) {
  if (value.empty()) return kDefaultHeadGroupKernel;
  if (const auto kernel = head_group_kernel_named(value)) return *kernel;
  const auto other =
      kDefaultHeadGroupKernel == HeadGroupKernel::kCudnn ? HeadGroupKernel::kFlash : HeadGroupKernel::kCudnn;
  throw UsageError(std::string(kLongRowAttentionVariable) + "=" + value + ": unknown attention kernel (" +
                   head_group_kernel_name(kDefaultHeadGroupKernel) + ", the default, or " +
                   head_group_kernel_name(other) + ")");
}

bool requested_norm_rope_kernel(const std::string& value) {
  if (value.empty() || value == "fused") return true;
  if (value == "aten") return false;
  throw UsageError(std::string(kNormRopeKernelVariable) + "=" + value +
                   ": expected fused (the default: one kernel for the q/k RMSNorm and RoPE) or aten (ATen's "
                   "RMSNorm, then the fused RoPE)");
}

}  // namespace finetune
