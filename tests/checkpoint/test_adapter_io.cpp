// read_adapter_config: adapter_config.json errors name the file, deeply nested JSON included.
#include <gtest/gtest.h>

#include "../test_support.h"

#include <string>

#include "finetune/checkpoint/adapter_io.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using testing::error_message;
using testing::expect_contains;
using testing::nested_json;
using testing::TempDir;

const std::string kValidConfig = R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"])";

TEST(AdapterConfig, ReadsAValidFile) {
  TempDir dir("adapter");
  dir.write("adapter_config.json", kValidConfig + "}");
  const LoraConfig config = read_adapter_config(dir.str());
  EXPECT_EQ(config.r, 4);
  EXPECT_EQ(config.lora_alpha, 8);
  EXPECT_EQ(config.target_modules, std::vector<std::string>{"q_proj"});
}

TEST(AdapterConfig, MissingAndMalformedFilesAreNamed) {
  TempDir dir("adapter");
  const std::string path = dir.file("adapter_config.json");
  expect_contains(error_message([&] { read_adapter_config(dir.str()); }), {path + ": cannot open", "PEFT adapter"});
  dir.write("adapter_config.json", "{\"r\": ");
  expect_contains(error_message([&] { read_adapter_config(dir.str()); }), {path + ": invalid JSON at line 1"});
}

// ~120 KB of nesting, as the whole file or below a key nothing reads.
TEST(AdapterConfig, DeepNestingIsRefusedNamingTheFile) {
  TempDir dir("adapter");
  const std::string path = dir.file("adapter_config.json");
  for (const char bracket : {'[', '{'}) {
    for (const std::string& text : {nested_json(bracket), kValidConfig + ", \"unused\": " + nested_json(bracket) + "}"}) {
      dir.write("adapter_config.json", text);
      expect_contains(error_message([&] { read_adapter_config(dir.str()); }),
                      {path + ": invalid JSON at line 1", "nests deeper than 128 levels"});
    }
  }
}

}  // namespace
}  // namespace finetune
