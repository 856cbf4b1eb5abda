// ModelConfig against transformers: every case written by tests/reference/make_config_fixtures.py
// is parsed and each field compared with what the Python config/model reports; then each
// rejected input must fail with an error naming the file and the field.
#include <gtest/gtest.h>

#include "../test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "finetune/io/model_config.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::json;

std::string config_fixture_dir() {
  const char* root = std::getenv("FINETUNE_FIXTURES");
  if (root == nullptr) return "";
  return std::string(root) + "/config";
}

json read_expected() {
  const std::string dir = config_fixture_dir();
  std::ifstream in(dir + "/expected.json");
  if (dir.empty() || !in) return json();
  return json::parse(in);
}

template <typename T>
std::optional<T> optional_of(const json& value) {
  if (value.is_null()) return std::nullopt;
  return value.get<T>();
}

TEST(ModelConfigTest, MatchesTransformersForEveryFixture) {
  const json expected_all = read_expected();
  ASSERT_TRUE(expected_all.is_object() && !expected_all.empty())
      << "missing fixtures: set FINETUNE_FIXTURES and run tests/reference/make_config_fixtures.py "
         "$FINETUNE_FIXTURES/config (looked in \""
      << config_fixture_dir() << "\")";
  EXPECT_GE(expected_all.size(), 15u);
  for (const auto& [name, expected] : expected_all.items()) {
    SCOPED_TRACE("fixture " + name);
    const ModelConfig c = load_model_config(config_fixture_dir() + "/" + name);
    EXPECT_EQ(c.architecture, expected.at("architecture").get<std::string>());
    EXPECT_EQ(c.model_type, expected.at("model_type").get<std::string>());
    EXPECT_EQ(c.vocab_size, expected.at("vocab_size").get<int64_t>());
    EXPECT_EQ(c.hidden_size, expected.at("hidden_size").get<int64_t>());
    EXPECT_EQ(c.intermediate_size, expected.at("intermediate_size").get<int64_t>());
    EXPECT_EQ(c.num_hidden_layers, expected.at("num_hidden_layers").get<int64_t>());
    EXPECT_EQ(c.num_attention_heads, expected.at("num_attention_heads").get<int64_t>());
    EXPECT_EQ(c.num_key_value_heads, expected.at("num_key_value_heads").get<int64_t>());
    EXPECT_EQ(c.head_dim, expected.at("head_dim").get<int64_t>());
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, expected.at("rms_norm_eps").get<double>());
    EXPECT_DOUBLE_EQ(c.rope_theta, expected.at("rope_theta").get<double>());
    EXPECT_EQ(c.rope_scaling.rope_type, expected.at("rope_type").get<std::string>());
    if (expected.contains("rope_factor")) {
      EXPECT_DOUBLE_EQ(c.rope_scaling.factor, expected["rope_factor"].get<double>());
    }
    if (expected.contains("low_freq_factor")) {
      EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, expected["low_freq_factor"].get<double>());
      EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, expected["high_freq_factor"].get<double>());
      EXPECT_EQ(c.rope_scaling.original_max_position_embeddings,
                expected["original_max_position_embeddings"].get<int64_t>());
    }
    EXPECT_EQ(c.tie_word_embeddings, expected.at("tie_word_embeddings").get<bool>());
    EXPECT_EQ(c.attention_bias, expected.at("attention_bias").get<bool>());
    EXPECT_EQ(c.attention_output_bias, expected.at("attention_output_bias").get<bool>());
    EXPECT_EQ(c.mlp_bias, expected.at("mlp_bias").get<bool>());
    EXPECT_EQ(c.qk_norm, expected.at("qk_norm").get<bool>());
    EXPECT_EQ(c.max_position_embeddings, expected.at("max_position_embeddings").get<int64_t>());
    EXPECT_EQ(c.torch_dtype, expected.at("torch_dtype").get<std::string>());
    EXPECT_EQ(c.bos_token_id, optional_of<int64_t>(expected.at("bos_token_id")));
    EXPECT_EQ(c.eos_token_ids, expected.at("eos_token_ids").get<std::vector<int64_t>>());
    EXPECT_EQ(c.pad_token_id, optional_of<int64_t>(expected.at("pad_token_id")));
    EXPECT_EQ(c.sliding_window, optional_of<int64_t>(expected.at("sliding_window")));
    EXPECT_TRUE(c.raw.is_object() && c.raw.contains("vocab_size"));
  }
}

// A minimal valid Llama config to corrupt one field at a time.
json base_config() {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", 128},
              {"hidden_size", 64},
              {"intermediate_size", 128},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"hidden_act", "silu"},
              {"rope_theta", 10000.0}};
}

// The message of the finetune::Error thrown for `config`; it must name the source.
std::string error_of(const json& config) {
  try {
    model_config_from_json(config, "model/config.json");
  } catch (const UsageError& e) {
    ADD_FAILURE() << "model config problems are Errors, not UsageErrors: " << e.what();
    return "";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model/config.json"), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "expected an Error for " << config.dump();
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ModelConfigTest, BaseConfigIsValid) {
  const ModelConfig c = model_config_from_json(base_config(), "x");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_FALSE(c.sliding_window.has_value());
}

TEST(ModelConfigTest, UnsupportedArchitectureListsSupportedOnes) {
  json c = base_config();
  c["architectures"] = {"GPT2LMHeadModel"};
  const std::string msg = error_of(c);
  EXPECT_TRUE(contains(msg, "GPT2LMHeadModel")) << msg;
  for (const char* arch : {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"})
    EXPECT_TRUE(contains(msg, arch)) << msg;

  c = base_config();
  c["architectures"] = {"LlamaForSequenceClassification"};
  EXPECT_TRUE(contains(error_of(c), "LlamaForSequenceClassification"));

  c = base_config();
  c.erase("architectures");
  c["model_type"] = "gemma";
  EXPECT_TRUE(contains(error_of(c), "gemma"));
}

TEST(ModelConfigTest, MismatchedModelType) {
  json c = base_config();
  c["model_type"] = "qwen2";
  EXPECT_TRUE(contains(error_of(c), "model_type"));
}

TEST(ModelConfigTest, ActivationMustBeSilu) {
  json c = base_config();
  c["hidden_act"] = "gelu";
  const std::string msg = error_of(c);
  EXPECT_TRUE(contains(msg, "hidden_act") && contains(msg, "gelu")) << msg;
}

TEST(ModelConfigTest, UnsupportedRopeTypes) {
  for (const char* type : {"longrope", "proportional", "ntk"}) {  // longrope: Phi-3's config only
    json v4 = base_config();
    v4["rope_scaling"] = {{"type", type}, {"factor", 2.0}};
    std::string msg = error_of(v4);
    EXPECT_TRUE(contains(msg, "rope_scaling.type") && contains(msg, type)) << msg;

    json v5 = base_config();
    v5["rope_parameters"] = {{"rope_type", type}, {"rope_theta", 10000.0}, {"factor", 2.0}};
    msg = error_of(v5);
    EXPECT_TRUE(contains(msg, "rope_parameters.rope_type") && contains(msg, type)) << msg;
  }
}

// yarn and dynamic (NTK) as transformers reads them: yarn's betas fall back to 32 / 1 when missing
// or 0, truncate to true, original_max_position_embeddings to the top-level key, then the rope
// dict's, then max_position_embeddings.
TEST(ModelConfigTest, YarnAndDynamicRopeParameters) {
  json c = base_config();
  c["max_position_embeddings"] = 4096;
  c["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}, {"beta_fast", 0},
                          {"mscale", 0.707}, {"mscale_all_dim", 1.0}, {"truncate", false},
                          {"original_max_position_embeddings", 1024}};
  auto config = model_config_from_json(c, "config.json");
  EXPECT_EQ(config.rope_scaling.rope_type, "yarn");
  EXPECT_EQ(config.rope_scaling.factor, 4.0);
  EXPECT_EQ(config.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(config.rope_scaling.beta_slow, 1.0);
  ASSERT_TRUE(config.rope_scaling.mscale && config.rope_scaling.mscale_all_dim);
  EXPECT_EQ(*config.rope_scaling.mscale, 0.707);
  EXPECT_EQ(*config.rope_scaling.mscale_all_dim, 1.0);
  EXPECT_FALSE(config.rope_scaling.truncate);
  EXPECT_FALSE(config.rope_scaling.attention_factor.has_value());
  EXPECT_EQ(config.rope_scaling.original_max_position_embeddings, 1024);
  c["original_max_position_embeddings"] = 2048;  // the top-level key wins
  EXPECT_EQ(model_config_from_json(c, "config.json").rope_scaling.original_max_position_embeddings, 2048);
  c.erase("original_max_position_embeddings");
  c["rope_parameters"].erase("original_max_position_embeddings");
  EXPECT_EQ(model_config_from_json(c, "config.json").rope_scaling.original_max_position_embeddings, 4096);
  c["rope_parameters"]["factor"] = 0.5;
  EXPECT_TRUE(contains(error_of(c), "rope_parameters.factor"));

  json dynamic = base_config();
  dynamic["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_EQ(model_config_from_json(dynamic, "config.json").rope_scaling.rope_type, "dynamic");
  dynamic["rope_scaling"] = {{"type", "dynamic"}};
  EXPECT_TRUE(contains(error_of(dynamic), "rope_scaling.factor"));
}

TEST(ModelConfigTest, Llama3RopeNeedsItsParameters) {
  json c = base_config();
  c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}};
  EXPECT_TRUE(contains(error_of(c), "rope_scaling.high_freq_factor"));
  c["rope_scaling"] = {{"rope_type", "linear"}};
  EXPECT_TRUE(contains(error_of(c), "rope_scaling.factor"));
  c["rope_scaling"] = "linear";
  EXPECT_TRUE(contains(error_of(c), "rope_scaling"));
}

TEST(ModelConfigTest, QwenSlidingWindowIsRejected) {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    json c = base_config();
    c["architectures"] = {arch};
    c.erase("model_type");
    c["use_sliding_window"] = true;
    c["sliding_window"] = 4096;
    const std::string msg = error_of(c);
    EXPECT_TRUE(contains(msg, "use_sliding_window")) << msg;
  }
  json c = base_config();
  c["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_TRUE(contains(error_of(c), "layer_types"));
}

TEST(ModelConfigTest, QwenSlidingWindowOffIsIgnored) {
  json c = base_config();
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["model_type"] = "qwen2";
  c["use_sliding_window"] = false;
  c["sliding_window"] = 32;
  const ModelConfig m = model_config_from_json(c, "x");
  EXPECT_FALSE(m.sliding_window.has_value());
  EXPECT_TRUE(m.attention_bias);
  EXPECT_FALSE(m.attention_output_bias);
}

TEST(ModelConfigTest, MistralSlidingWindowIsRecorded) {
  json c = base_config();
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  c["max_position_embeddings"] = 32768;
  c["sliding_window"] = 4096;
  EXPECT_EQ(model_config_from_json(c, "x").sliding_window, 4096);
  c["sliding_window"] = nullptr;
  EXPECT_FALSE(model_config_from_json(c, "x").sliding_window.has_value());
  c["sliding_window"] = 0;
  EXPECT_TRUE(contains(error_of(c), "sliding_window"));
}

TEST(ModelConfigTest, MistralWindowAppliesToEveryLayerAtAnyLength) {
  json c = base_config();
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  c["sliding_window"] = 512;
  const ModelConfig mistral = model_config_from_json(c, "x");
  for (int64_t layer = 0; layer < mistral.num_hidden_layers; ++layer) EXPECT_TRUE(layer_is_sliding(mistral, layer));
  c["sliding_window"] = nullptr;  // no window
  EXPECT_FALSE(layer_is_sliding(model_config_from_json(c, "x"), 0));
  EXPECT_FALSE(layer_is_sliding(model_config_from_json(base_config(), "x"), 0));  // Llama
}

// Gemma's defaults are its config classes' (Gemma2Config, Gemma3TextConfig): alternating layers
// from a sliding one (Gemma-2), every sixth layer global (Gemma-3), soft-caps 50 / 30 (Gemma-2
// only), query_pre_attn_scalar 256, GeGLU, tied embeddings, rope bases 1e6 global / 1e4 local.
TEST(ModelConfigTest, GemmaDefaultsAreTheConfigClasses) {
  json c = {{"architectures", {"Gemma2ForCausalLM"}}, {"num_hidden_layers", 3}, {"vocab_size", 64}};
  const ModelConfig gemma2 = model_config_from_json(c, "x");
  EXPECT_EQ(gemma2.sliding_layers, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(gemma2.sliding_window, 4096);
  EXPECT_EQ(gemma2.attn_logit_softcapping, 50.0);
  EXPECT_EQ(gemma2.final_logit_softcapping, 30.0);
  EXPECT_EQ(gemma2.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(gemma2.hidden_size, 2304);
  EXPECT_EQ(gemma2.head_dim, 256);
  EXPECT_EQ(gemma2.num_key_value_heads, 4);
  EXPECT_TRUE(gemma2.tie_word_embeddings);
  EXPECT_EQ(gemma2.hidden_activation, "gelu_pytorch_tanh");
  EXPECT_EQ(gemma2.rope_theta, 10000.0);
  EXPECT_FALSE(gemma2.rope_local_base_freq.has_value());

  json t = {{"architectures", {"Gemma3ForCausalLM"}}, {"num_hidden_layers", 7}, {"vocab_size", 64}};
  const ModelConfig gemma3 = model_config_from_json(t, "x");
  EXPECT_EQ(gemma3.sliding_layers, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_FALSE(gemma3.attn_logit_softcapping.has_value());
  EXPECT_FALSE(gemma3.final_logit_softcapping.has_value());
  EXPECT_EQ(gemma3.rope_theta, 1000000.0);
  EXPECT_EQ(gemma3.rope_local_base_freq, 10000.0);
  t["sliding_window_pattern"] = 2;
  EXPECT_EQ(model_config_from_json(t, "x").sliding_layers,
            (std::vector<bool>{true, false, true, false, true, false, true}));
}

// transformers 4.x's spelling (rope_theta, rope_scaling for global layers, rope_local_base_freq) and
// 5.x's rope_parameters per layer type give one config; a multimodal checkpoint's text_config is read.
TEST(ModelConfigTest, Gemma3RopeSpellingsAndTheMultimodalTextConfig) {
  json v4 = {{"architectures", {"Gemma3ForCausalLM"}}, {"num_hidden_layers", 2}, {"rope_theta", 500000.0},
             {"rope_local_base_freq", 20000.0}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}};
  json v5 = {{"architectures", {"Gemma3ForCausalLM"}}, {"num_hidden_layers", 2},
             {"rope_parameters", {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 500000.0}}},
                                  {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}}}};
  for (const json& c : {v4, v5}) {
    const ModelConfig m = model_config_from_json(c, "x");
    EXPECT_EQ(m.rope_theta, 500000.0);
    EXPECT_EQ(m.rope_scaling.rope_type, "linear");
    EXPECT_EQ(m.rope_scaling.factor, 8.0);
    EXPECT_EQ(m.rope_local_base_freq, 20000.0);
  }
  json multimodal = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"},
                     {"dtype", "bfloat16"},
                     {"text_config", {{"hidden_size", 2560}, {"num_hidden_layers", 34}, {"sliding_window", 1024},
                                      {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}}}};
  const ModelConfig m = model_config_from_json(multimodal, "x");
  EXPECT_EQ(m.architecture, "Gemma3ForConditionalGeneration");
  EXPECT_EQ(m.hidden_size, 2560);
  EXPECT_EQ(m.vocab_size, 262208);
  EXPECT_EQ(m.sliding_window, 1024);
  EXPECT_EQ(m.torch_dtype, "bfloat16");
  EXPECT_EQ(m.rope_scaling.factor, 8.0);
  multimodal["text_config"]["num_hidden_layers"] = "many";
  EXPECT_TRUE(contains(error_of(multimodal), "text_config.num_hidden_layers"));
}

TEST(ModelConfigTest, GemmaFeaturesFinetuneDoesNotComputeAreRefused) {
  json c = {{"architectures", {"Gemma3ForCausalLM"}}, {"num_hidden_layers", 2}};
  c["use_bidirectional_attention"] = true;
  EXPECT_TRUE(contains(error_of(c), "use_bidirectional_attention"));
  c.erase("use_bidirectional_attention");
  c["hidden_activation"] = "relu";
  EXPECT_TRUE(contains(error_of(c), "hidden_activation"));
  c.erase("hidden_activation");
  c["layer_types"] = {"sliding_attention"};  // one type for two layers
  EXPECT_TRUE(contains(error_of(c), "layer_types"));
  c["layer_types"] = {"sliding_attention", "chunked_attention"};
  EXPECT_TRUE(contains(error_of(c), "chunked_attention"));
  c.erase("layer_types");
  c["rope_parameters"] = {{"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}};
  EXPECT_TRUE(contains(error_of(c), "rope_parameters.sliding_attention.rope_type"));
}

TEST(ModelConfigTest, HeadsMustDivide) {
  json c = base_config();
  c["num_key_value_heads"] = 3;
  EXPECT_TRUE(contains(error_of(c), "num_key_value_heads"));
  c = base_config();
  c["num_attention_heads"] = 5;
  c["num_key_value_heads"] = 5;
  EXPECT_TRUE(contains(error_of(c), "num_attention_heads"));  // 64 % 5, no head_dim
  c["head_dim"] = 16;  // explicit head_dim makes it well defined
  EXPECT_EQ(model_config_from_json(c, "x").head_dim, 16);
}

TEST(ModelConfigTest, MissingRequiredKeys) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    json c = base_config();
    c.erase(key);
    const std::string msg = error_of(c);
    EXPECT_TRUE(contains(msg, key) && contains(msg, "missing")) << msg;
  }
  json c = base_config();
  c.erase("architectures");
  c.erase("model_type");
  EXPECT_TRUE(contains(error_of(c), "architectures"));
}

TEST(ModelConfigTest, WrongJsonTypes) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"hidden_size", "64"},       {"vocab_size", 12.5},        {"num_hidden_layers", true},
      {"tie_word_embeddings", 1},  {"rms_norm_eps", "1e-6"},    {"eos_token_id", "2"},
      {"bos_token_id", {1}},       {"hidden_act", 3},           {"torch_dtype", 16},
      {"architectures", "LlamaForCausalLM"}, {"attention_bias", "false"}, {"num_key_value_heads", 0},
  };
  for (const auto& [key, value] : cases) {
    json c = base_config();
    c[key] = value;
    const std::string msg = error_of(c);
    EXPECT_TRUE(contains(msg, "\"" + key + "\"")) << key << ": " << msg;
  }
  EXPECT_TRUE(contains(error_of(json::array()), "object"));
}

// quantization_config as transformers writes BitsAndBytesConfig.to_dict() for a 4-bit checkpoint
// (tests/e2e/test_qlora.py loads one transformers saved); anything else is an error naming the field.
TEST(ModelConfigTest, Bitsandbytes4bitQuantizationConfig) {
  const json bnb = {{"_load_in_4bit", true}, {"_load_in_8bit", false}, {"bnb_4bit_compute_dtype", "bfloat16"},
                    {"bnb_4bit_quant_storage", "uint8"}, {"bnb_4bit_quant_type", "nf4"},
                    {"bnb_4bit_use_double_quant", true}, {"llm_int8_enable_fp32_cpu_offload", false},
                    {"llm_int8_has_fp16_weight", false}, {"llm_int8_skip_modules", {"lm_head"}},
                    {"llm_int8_threshold", 6.0}, {"load_in_4bit", true}, {"load_in_8bit", false},
                    {"quant_method", "bitsandbytes"}};
  json c = base_config();
  EXPECT_FALSE(model_config_from_json(c, "x").quantization.has_value());
  c["quantization_config"] = bnb;
  const auto quantization = model_config_from_json(c, "x").quantization;
  ASSERT_TRUE(quantization.has_value());
  EXPECT_EQ(quantization->quant_type, "nf4");
  EXPECT_TRUE(quantization->use_double_quant);
  EXPECT_EQ(quantization->compute_dtype, "bfloat16");
  EXPECT_EQ(quantization->skip_modules, std::vector<std::string>{"lm_head"});

  const std::vector<std::tuple<std::string, json, std::string>> refused = {
      {"quant_method", "gptq", "only bitsandbytes 4-bit"},
      {"load_in_8bit", true, "8-bit"},
      {"load_in_4bit", false, "expected true"},
      {"bnb_4bit_quant_type", "int4", "nf4, fp4"},
      {"bnb_4bit_quant_storage", "float16", "only uint8"},
      {"bnb_4bit_use_double_quant", "yes", "expected true or false"},
      {"llm_int8_skip_modules", "lm_head", "list of names"},
      {"llm_int8_skip_modules", {1}, "list of names"},
  };
  for (const auto& [key, value, problem] : refused) {
    json bad = base_config();
    bad["quantization_config"] = bnb;
    bad["quantization_config"][key] = value;
    const std::string msg = error_of(bad);
    EXPECT_TRUE(contains(msg, "\"quantization_config." + key + "\"") && contains(msg, problem)) << key << ": " << msg;
  }
  c["quantization_config"] = "bitsandbytes";
  EXPECT_TRUE(contains(error_of(c), "\"quantization_config\": expected an object")) << error_of(c);
}

// Integers beyond int64 (and floats beyond its range, whose conversion was undefined) are errors
// naming the field, not wrapped values; integral floats within range still count as integers.
TEST(ModelConfigTest, IntegersOutOfInt64RangeAreErrors) {
  for (const auto& [key, text] : std::vector<std::pair<std::string, std::string>>{
           {"hidden_size", "1e300"}, {"vocab_size", "9223372036854775808"}, {"bos_token_id", "18446744073709551615"},
           {"eos_token_id", "-1e19"}, {"pad_token_id", "9.3e18"}}) {
    json c = base_config();
    c[key] = json::parse(text);
    const std::string msg = error_of(c);
    EXPECT_TRUE(contains(msg, "\"" + key + "\"")) << key << ": " << msg;
  }
  json c = base_config();
  c["hidden_size"] = 64.0;
  c["pad_token_id"] = -9223372036854775807LL - 1;
  const ModelConfig config = model_config_from_json(c, "x");
  EXPECT_EQ(config.hidden_size, 64);
  EXPECT_EQ(config.pad_token_id, std::numeric_limits<int64_t>::min());
}

TEST(ModelConfigTest, UnsupportedDtype) {
  json c = base_config();
  c["torch_dtype"] = "float8_e4m3fn";
  EXPECT_TRUE(contains(error_of(c), "torch_dtype"));
}

TEST(ModelConfigTest, EosForms) {
  json c = base_config();
  c["eos_token_id"] = {7, 9};
  EXPECT_EQ(model_config_from_json(c, "x").eos_token_ids, (std::vector<int64_t>{7, 9}));
  c["eos_token_id"] = 5;
  EXPECT_EQ(model_config_from_json(c, "x").eos_token_ids, (std::vector<int64_t>{5}));
  c["eos_token_id"] = nullptr;
  EXPECT_TRUE(model_config_from_json(c, "x").eos_token_ids.empty());
}

TEST(ModelConfigTest, LoadErrorsNameThePath) {
  const std::string dir = ::testing::TempDir() + "/model_config_load_errors";
  std::filesystem::create_directories(dir);
  try {
    load_model_config(dir + "/absent");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), dir + "/absent/config.json")) << e.what();
  }
  std::ofstream(dir + "/config.json") << "{\"vocab_size\": ";
  try {
    load_model_config(dir);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), dir + "/config.json")) << e.what();
  }
}

// ~120 KB of nesting, as the whole file or under a key nothing reads: an error naming the file.
TEST(ModelConfigTest, DeepNestingIsRefusedNamingTheFile) {
  testing::TempDir dir("deep_config");
  const std::string path = dir.file("config.json");
  std::string valid = base_config().dump();
  valid.pop_back();  // the closing brace, to append one more key
  for (const char bracket : {'[', '{'}) {
    for (const std::string& text : {testing::nested_json(bracket), valid + ", \"unused\": " + testing::nested_json(bracket) + "}"}) {
      dir.write("config.json", text);
      testing::expect_contains(testing::error_message([&] { load_model_config(dir.str()); }),
                               {path + ": invalid JSON at line 1", "nests deeper than 128 levels"});
    }
  }
  dir.write("config.json", valid + ", \"unused\": " + testing::nested_json('[', 2 * kMaxJsonDepth - 2) + "}");
  EXPECT_EQ(load_model_config(dir.str()).hidden_size, base_config()["hidden_size"].get<int64_t>());
}

}  // namespace
}  // namespace finetune

namespace finetune {
namespace {

// Phi-3-mini-128k / Phi-4-mini as the hub writes them (transformers 4 spelling): rope_scaling with
// type "longrope", top-level original_max_position_embeddings and partial_rotary_factor.
nlohmann::json phi3_hub_config() {
  std::vector<double> short_factor(6, 1.0), long_factor(6, 2.0);
  return {{"architectures", {"Phi3ForCausalLM"}}, {"model_type", "phi3"}, {"vocab_size", 96}, {"hidden_size", 64},
          {"intermediate_size", 112}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"max_position_embeddings", 131072}, {"original_max_position_embeddings", 4096},
          {"partial_rotary_factor", 0.75}, {"rope_theta", 10000.0}, {"sliding_window", 262144},
          {"rope_scaling", {{"type", "longrope"}, {"short_factor", short_factor}, {"long_factor", long_factor},
                            {"original_max_position_embeddings", 999}}}};
}

TEST(ModelConfigTest, Phi3LongropeFollowsPhi3Config) {
  const ModelConfig c = model_config_from_json(phi3_hub_config(), "phi3/config.json");
  EXPECT_EQ(c.architecture, "Phi3ForCausalLM");
  EXPECT_EQ(c.rope_scaling.rope_type, "longrope");
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.75);
  // The top-level key wins over the rope dict's, as Phi3Config's standardize_rope_params does.
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);  // max_position_embeddings / original
  EXPECT_EQ(c.rope_scaling.short_factor, std::vector<double>(6, 1.0));
  EXPECT_EQ(c.rope_scaling.long_factor, std::vector<double>(6, 2.0));
  EXPECT_EQ(c.sliding_window, std::optional<int64_t>(262144));
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(1));  // Phi3Config's defaults, from the table
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{32000});

  auto su = phi3_hub_config();
  su["rope_scaling"]["type"] = "su";  // the old name of longrope
  EXPECT_EQ(model_config_from_json(su, "x").rope_scaling.rope_type, "longrope");
  auto none = phi3_hub_config();
  none["rope_scaling"] = nullptr;  // Phi-3-mini-4k
  none.erase("sliding_window");
  const ModelConfig plain = model_config_from_json(none, "x");
  EXPECT_EQ(plain.rope_scaling.rope_type, "default");
  EXPECT_FALSE(plain.sliding_window.has_value());
}

TEST(ModelConfigTest, Phi3RopeErrorsNameTheField) {
  auto short_list = phi3_hub_config();
  short_list["rope_scaling"]["long_factor"] = std::vector<double>(8, 1.0);  // 12 rotary dims need 6
  EXPECT_TRUE(contains(error_of(short_list), "rope_scaling.long_factor")) << error_of(short_list);
  auto odd = phi3_hub_config();
  odd["partial_rotary_factor"] = 0.2;  // int(16 * 0.2) = 3 rotary dims: not pairs
  EXPECT_TRUE(contains(error_of(odd), "partial_rotary_factor"));
  auto llama_partial = base_config();  // only Phi-3 rotates part of a head
  llama_partial["rope_scaling"] = {{"type", "default"}, {"partial_rotary_factor", 0.5}};
  EXPECT_TRUE(contains(error_of(llama_partial), "partial_rotary_factor"));
}

}  // namespace
}  // namespace finetune
