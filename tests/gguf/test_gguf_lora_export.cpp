// The LoRA adapter GGUF's settings (gguf/gguf_lora_export.h); its bytes are compared with
// convert_lora_to_gguf.py's in tests/e2e/test_gguf_adapter.py.
#include <gtest/gtest.h>

#include <cmath>

#include "finetune/gguf/gguf_lora_export.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

TEST(GgufLoraExport, AlphaGivesLlamaCppTheTrainedScaling) {
  LoraConfig lora;
  lora.r = 16;
  lora.lora_alpha = 32;
  EXPECT_EQ(gguf_lora_alpha(lora), 32.0);  // llama.cpp: alpha / r = 2 = lora_scaling
  lora.use_rslora = true;
  EXPECT_DOUBLE_EQ(gguf_lora_alpha(lora) / lora.r, lora_scaling(lora));  // 32 / sqrt(16) = 8
}

TEST(GgufLoraExport, FileNameAndRefusals) {
  EXPECT_EQ(gguf_lora_file_path("out", "org/Tiny-1B", GgmlType::kF16), "out/Tiny-1B.LoRA-F16.gguf");
  ModelConfig config;
  LoraConfig lora;
  EXPECT_THROW(export_gguf_lora(config, lora, {}, "unused", "m", "out", {"q4_k_m"}), UsageError);
  EXPECT_THROW(export_gguf_lora(config, lora, {}, "unused", "m", "out", {"q3_k"}), UsageError);
  lora.use_dora = true;
  EXPECT_THROW(export_gguf_lora(config, lora, {}, "unused", "m", "out", {"f16"}), UsageError);
  lora.use_dora = false;
  lora.target_parameters = {"mlp.experts.gate_up_proj"};  // expert stacks: no lora_a/lora_b form
  EXPECT_THROW(export_gguf_lora(config, lora, {}, "unused", "m", "out", {"f16"}), UsageError);
}

}  // namespace
}  // namespace finetune
