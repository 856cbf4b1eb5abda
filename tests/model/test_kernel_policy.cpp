// The kernel policy's choices for the families whose attention or norms ATen's fused kernels do not
// compute (model/kernel_policy.h): Gemma-2's soft-capped attention keeps padding-free batches but
// runs eager attention per sample, without flash attention or CUDA graphs; Gemma's (1 + w) norms
// never take the fused RMSNorm. The policy reads only the device type, so a CUDA policy is
// checked on any machine.
#include <gtest/gtest.h>

#include "finetune/model/kernel_policy.h"
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

}  // namespace
}  // namespace finetune
