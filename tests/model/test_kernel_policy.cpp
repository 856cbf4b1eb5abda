// The kernel policy's choices for the families whose attention or norms ATen's fused kernels do not
// compute (model/kernel_policy.h): Gemma-2's soft-capped attention keeps padding-free batches but
// runs eager attention per sample, without flash attention or CUDA graphs; Gemma's (1 + w) norms
// never take the fused RMSNorm. Long rows' cuDNN attention only when asked for and flash attention
// is on. The policy reads only the device type, so a CUDA policy is checked on any machine.
#include <gtest/gtest.h>

#include "finetune/model/kernel_policy.h"
#include "finetune/util/errors.h"
#include "tiny_config.h"

namespace finetune {
namespace {

ModelConfig gemma_config(const char* class_name, std::optional<double> attn_logit_softcapping) {
  auto config = tiny_llama_config({32, 16, 24, 2, 2, 1, 16});
  config.architecture = class_name;
  config.attn_logit_softcapping = attn_logit_softcapping;
  return config;
}

TEST(KernelPolicy, SoftCappedAttentionKeepsPaddingFreeBatchesWithoutFlashOrGraphs) {
  const at::Device cuda(at::kCUDA, 0);
  const auto gemma2 = choose_kernel_policy(cuda, at::kBFloat16, gemma_config("Gemma2ForCausalLM", 50.0));
  EXPECT_TRUE(gemma2.softcapped_attention);
  EXPECT_TRUE(gemma2.padding_free_batches);
  EXPECT_FALSE(gemma2.variable_length_attention);
  EXPECT_FALSE(gemma2.cuda_graphs);
  EXPECT_FALSE(gemma2.fused_rms_norm);
  EXPECT_NE(gemma2.describe().find("padding-free eager soft-capped attention"), std::string::npos) << gemma2.describe();

  const auto gemma3 = choose_kernel_policy(cuda, at::kBFloat16, gemma_config("Gemma3ForCausalLM", std::nullopt));
  EXPECT_FALSE(gemma3.softcapped_attention);
  EXPECT_TRUE(gemma3.variable_length_attention && gemma3.padding_free_batches);
  EXPECT_EQ(gemma3.cuda_graphs, cuda_kernels_compiled_in());
  EXPECT_FALSE(gemma3.fused_rms_norm);

  const auto llama = choose_kernel_policy(cuda, at::kBFloat16, tiny_llama_config({32, 16, 24, 2, 2, 1, 16}));
  EXPECT_TRUE(llama.fused_rms_norm && llama.variable_length_attention);

  const auto cpu = choose_kernel_policy(at::Device(at::kCPU), at::kFloat, gemma_config("Gemma2ForCausalLM", 50.0));
  EXPECT_FALSE(cpu.padding_free_batches || cpu.variable_length_attention || cpu.cuda_graphs);
  EXPECT_NE(cpu.describe().find("padded eager soft-capped attention"), std::string::npos) << cpu.describe();
}

TEST(KernelPolicy, LongRowCudnnAttentionByDefaultWhereFlashAttentionIsOn) {
  const at::Device cuda(at::kCUDA, 0);
  const auto llama_config = tiny_llama_config({32, 16, 24, 2, 2, 1, 16});
  const auto by_default = choose_kernel_policy(cuda, at::kBFloat16, llama_config);
  EXPECT_EQ(by_default.long_row_attention, HeadGroupKernel::kCudnn);
  const std::string cudnn_line = "long single-sample rows: cuDNN attention per KV head (FINETUNE_LONG_ROW_ATTENTION)";
  EXPECT_NE(by_default.describe().find(cudnn_line), std::string::npos) << by_default.describe();
  const auto flash = choose_kernel_policy(cuda, at::kBFloat16, llama_config, KernelRequests{HeadGroupKernel::kFlash});
  EXPECT_EQ(flash.long_row_attention, HeadGroupKernel::kFlash);
  EXPECT_NE(flash.describe().find("long single-sample rows: flash attention per KV head"), std::string::npos)
      << flash.describe();
  EXPECT_EQ(flash.describe().find("cuDNN"), std::string::npos) << flash.describe();
  // No flash attention, no head groups to run on cuDNN: the CPU, fp32, soft-capped attention.
  for (const auto& policy :
       {choose_kernel_policy(at::Device(at::kCPU), at::kBFloat16, llama_config, KernelRequests{HeadGroupKernel::kCudnn}),
        choose_kernel_policy(cuda, at::kFloat, llama_config, KernelRequests{HeadGroupKernel::kCudnn}),
        choose_kernel_policy(cuda, at::kBFloat16, gemma_config("Gemma2ForCausalLM", 50.0), KernelRequests{HeadGroupKernel::kCudnn})}) {
    EXPECT_EQ(policy.long_row_attention, HeadGroupKernel::kFlash);
  }
}

TEST(KernelPolicy, FusedNormRopeByDefaultForQueryKeyNormsWhereBothFusedPathsAreOnUnlessAtenIsAsked) {
  const at::Device cuda(at::kCUDA, 0);
  auto qwen3_config = tiny_llama_config({32, 16, 24, 2, 2, 1, 16});
  qwen3_config.architecture = "Qwen3ForCausalLM";
  const KernelRequests aten{kDefaultHeadGroupKernel, /*fused_norm_rope=*/false};
  EXPECT_FALSE(choose_kernel_policy(cuda, at::kBFloat16, qwen3_config, aten).fused_norm_rope);
  const KernelRequests asked;  // the default requests
  const auto on = choose_kernel_policy(cuda, at::kBFloat16, qwen3_config, asked);
  EXPECT_EQ(on.fused_norm_rope, cuda_kernels_compiled_in());
  EXPECT_EQ(on.describe().find("fused q/k RMSNorm + RoPE (FINETUNE_NORM_ROPE_KERNEL)") != std::string::npos,
            cuda_kernels_compiled_in())
      << on.describe();
  // Without q/k norms (Llama), or without the fused RoPE or the fused RMSNorm: the CPU, fp32,
  // Gemma-3's (1 + w) norms.
  EXPECT_FALSE(choose_kernel_policy(cuda, at::kBFloat16, tiny_llama_config({32, 16, 24, 2, 2, 1, 16}), asked)
                   .fused_norm_rope);
  EXPECT_FALSE(choose_kernel_policy(at::Device(at::kCPU), at::kBFloat16, qwen3_config, asked).fused_norm_rope);
  EXPECT_FALSE(choose_kernel_policy(cuda, at::kFloat, qwen3_config, asked).fused_norm_rope);
  EXPECT_FALSE(choose_kernel_policy(cuda, at::kBFloat16, gemma_config("Gemma3ForCausalLM", std::nullopt), asked)
                   .fused_norm_rope);
}

TEST(KernelPolicy, NormRopeKernelVariableSaysAtenOrFused) {
  EXPECT_TRUE(requested_norm_rope_kernel(""));  // unset
  EXPECT_FALSE(requested_norm_rope_kernel("aten"));
  EXPECT_TRUE(requested_norm_rope_kernel("fused"));
  try {
    requested_norm_rope_kernel("on");
    ADD_FAILURE() << "no error for on";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("FINETUNE_NORM_ROPE_KERNEL=on"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fused"), std::string::npos) << e.what();
  }
}

TEST(KernelPolicy, LongRowAttentionVariableNamesAKernel) {
  EXPECT_EQ(requested_long_row_attention(""), HeadGroupKernel::kCudnn);  // unset
  EXPECT_EQ(requested_long_row_attention("flash"), HeadGroupKernel::kFlash);
  EXPECT_EQ(requested_long_row_attention("cudnn"), HeadGroupKernel::kCudnn);
  try {
    requested_long_row_attention("1");
    ADD_FAILURE() << "no error for 1";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("FINETUNE_LONG_ROW_ATTENTION=1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudnn"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace finetune
