// validate_model_config_bounds (Note [Config bounds] in model_config.cpp): sizes no real model has
// are an error naming config.json and the field before anything is allocated from them, and
// rope_theta must be a positive number.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "../test_support.h"
#include "finetune/io/model_config.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::json;

// A small Llama config.json with `changes` applied.
json llama_with(const json& changes) {
  json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 128256},
                 {"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_hidden_layers", 32},
                 {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"max_position_embeddings", 131072},
                 {"rope_theta", 500000.0}, {"torch_dtype", "bfloat16"}};
  config.update(changes);
  return config;
}

std::string refusal(const json& changes) {
  return testing::error_message([&] { model_config_from_json(llama_with(changes), "/m/config.json"); });
}

TEST(ModelConfigBounds, RealModelSizesAreAccepted) {
  EXPECT_NO_THROW(model_config_from_json(llama_with(json::object()), "/m/config.json"));  // Llama-3.1-8B
  // Llama-3.1-405B: 126 layers, hidden 16384, 53248 intermediate
  EXPECT_NO_THROW(model_config_from_json(
      llama_with({{"hidden_size", 16384}, {"intermediate_size", 53248}, {"num_hidden_layers", 126},
                  {"num_attention_heads", 128}}),
      "/m/config.json"));
}

TEST(ModelConfigBounds, HugeSizesNameTheFileAndTheField) {
  const auto start = std::chrono::steady_clock::now();
  testing::expect_contains(refusal({{"num_hidden_layers", 1000000000}}),
                           {"/m/config.json", "\"num_hidden_layers\"", "1000000000", "at most 1024"});
  testing::expect_contains(refusal({{"vocab_size", int64_t{1} << 40}}),
                           {"/m/config.json", "\"vocab_size\"", "1099511627776"});
  for (const char* field : {"hidden_size", "intermediate_size", "num_attention_heads", "max_position_embeddings"})
    testing::expect_contains(refusal({{field, int64_t{1} << 40}}), {"/m/config.json", std::string("\"") + field});
  testing::expect_contains(refusal({{"head_dim", 1 << 20}}), {"\"head_dim\""});
  testing::expect_contains(refusal({{"vocab_size", 1 << 24}, {"hidden_size", 65536}}),
                           {"/m/config.json", "billion parameters", "at most 2^40"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(ModelConfigBounds, RopeThetaMustBePositive) {
  testing::expect_contains(refusal({{"rope_theta", 0}}),
                           {"/m/config.json", "\"rope_theta\"", "not a positive finite number"});
  testing::expect_contains(refusal({{"rope_theta", -10000.0}}), {"\"rope_theta\": -10000"});
  testing::expect_contains(refusal({{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 0.0}}}}),
                           {"\"rope_theta\""});
}

}  // namespace
}  // namespace finetune
