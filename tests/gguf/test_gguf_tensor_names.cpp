// GGUF architecture names: llama.cpp's for the families the export writes, a clear refusal for the
// families it does not (yet) write.
#include <gtest/gtest.h>

#include "../test_support.h"

#include "finetune/gguf/gguf_tensor_names.h"
#include "finetune/io/model_config.h"

namespace finetune {
namespace {

ModelConfig config_of(const std::string& architecture) {
  ModelConfig config;
  config.architecture = architecture;
  return config;
}

TEST(GgufTensorNames, ArchitectureNamesOfTheExportedFamilies) {
  EXPECT_EQ(gguf_architecture(config_of("LlamaForCausalLM"), "m/config.json"), "llama");
  EXPECT_EQ(gguf_architecture(config_of("MistralForCausalLM"), "m/config.json"), "llama");
  EXPECT_EQ(gguf_architecture(config_of("Qwen2ForCausalLM"), "m/config.json"), "qwen2");
  EXPECT_EQ(gguf_architecture(config_of("Qwen3ForCausalLM"), "m/config.json"), "qwen3");
}

// Phi-3 and Gemma train, but their GGUF files need metadata the export does not write: refused,
// naming the class and the families that export, never a file llama.cpp would misread.
TEST(GgufTensorNames, FamiliesWithoutAnExportAreRefusedByName) {
  for (const char* name : {"Phi3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}) {
    const std::string message = testing::error_message([&] { gguf_architecture(config_of(name), "m/config.json"); });
    EXPECT_NE(message.find(std::string("m/config.json: ") + name + " has no GGUF export yet"), std::string::npos)
        << message;
    EXPECT_NE(message.find("LlamaForCausalLM"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace finetune
