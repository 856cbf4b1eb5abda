// lora_config_from_adapter_json: PEFT's adapter_config.json round-trips, and every mistyped or
// unsupported field is a finetune::Error naming the file and the field (the fuzzer found
// nlohmann's type_error escaping from value() on mistyped booleans and strings).
#include <gtest/gtest.h>

#include "../test_support.h"

#include <string>
#include <vector>

#include "finetune/lora/lora_config.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::json;
using testing::error_message;
using testing::expect_contains;

const std::string kSource = "adapter/adapter_config.json";

json valid_config() {
  LoraConfig config;
  config.r = 8;
  config.lora_alpha = 16;
  config.lora_dropout = 0.05;
  config.use_rslora = true;
  config.target_modules = {"q_proj", "v_proj"};
  return adapter_config_json(config, "base");
}

TEST(LoraConfigJson, RoundTrips) {
  const LoraConfig config = lora_config_from_adapter_json(valid_config(), kSource);
  EXPECT_EQ(config.r, 8);
  EXPECT_EQ(config.lora_alpha, 16);
  EXPECT_DOUBLE_EQ(config.lora_dropout, 0.05);
  EXPECT_TRUE(config.use_rslora);
  EXPECT_EQ(config.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  json minimal = {{"r", 4}, {"lora_alpha", 8}, {"target_modules", {"q_proj"}}, {"peft_type", nullptr}};
  EXPECT_EQ(lora_config_from_adapter_json(minimal, kSource).bias, "none");
}

TEST(LoraConfigJson, MistypedFieldsNameTheField) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"peft_type", 5},        {"r", 8.5},           {"r", "8"},          {"r", 0},
      {"r", -3},               {"r", 18446744073709551615ULL},            {"r", true},
      {"lora_alpha", "16"},    {"lora_alpha", nullptr},                   {"lora_dropout", "0.1"},
      {"use_rslora", "yes"},   {"use_dora", "no"},   {"fan_in_fan_out", 1}, {"bias", 0},
      {"target_modules", {"q_proj", 1}},             {"target_modules", "all-linear"},
      {"target_modules", nullptr},
  };
  for (const auto& [key, value] : cases) {
    json config = valid_config();
    config[key] = value;
    SCOPED_TRACE(key + " = " + value.dump());
    expect_contains(error_message([&] { lora_config_from_adapter_json(config, kSource); }), {kSource, key});
  }
}

TEST(LoraConfigJson, BiasIsPeftsNoneAllOrLoraOnly) {
  for (const char* bias : {"none", "all", "lora_only"}) {
    json config = valid_config();
    config["bias"] = bias;
    EXPECT_EQ(lora_config_from_adapter_json(config, kSource).bias, bias);
  }
}

TEST(LoraConfigJson, ModulesToSaveIsNullOrEmbedTokens) {
  json config = valid_config();
  config["modules_to_save"] = nullptr;
  EXPECT_TRUE(lora_config_from_adapter_json(config, kSource).modules_to_save.empty());
  config["modules_to_save"] = json::array({"embed_tokens"});
  const LoraConfig read = lora_config_from_adapter_json(config, kSource);
  EXPECT_EQ(read.modules_to_save, std::vector<std::string>{"embed_tokens"});
  EXPECT_EQ(adapter_config_json(read, "base")["modules_to_save"], json::array({"embed_tokens"}));
  EXPECT_TRUE(adapter_config_json(LoraConfig{}, "base")["modules_to_save"].is_null());
  config["modules_to_save"] = json::array({"lm_head"});
  expect_contains(error_message([&] { lora_config_from_adapter_json(config, kSource); }),
                  {kSource, "'modules_to_save' names 'lm_head'", "no gradient for the head weight"});
}

TEST(LoraConfigJson, UnsupportedSettingsAreRefused) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"peft_type", "PREFIX_TUNING"}, {"bias", "some"}, {"rank_pattern", {{"q_proj", 4}}},
           {"modules_to_save", {"lm_head"}}}) {
    json config = valid_config();
    config[key] = value;
    expect_contains(error_message([&] { lora_config_from_adapter_json(config, kSource); }), {kSource, key});
  }
  expect_contains(error_message([] { lora_config_from_adapter_json(json::array(), kSource); }), {kSource, "object"});
}

}  // namespace
}  // namespace finetune
