// Option table and layered parsing: defaults, every value form, precedence file < env < CLI,
// duplicates, unknown keys and out-of-range values (each an error naming the option).
#include <gtest/gtest.h>

#include "../test_support.h"

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "finetune/config/options.h"
#include "option_test_helpers.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using testing::parse_args;
using testing::parse_train;

// Message of the UsageError thrown by `fn`, or a failure.
template <typename Fn>
std::string usage_error_of(Fn fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected UsageError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected UsageError, nothing was thrown";
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string write_temp_file(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(OptionsTest, DefaultsMatchUnslothCli) {
  const Command c = parse_train({});
  EXPECT_EQ(c.action, "train");
  EXPECT_FALSE(c.help);
  const Options& o = c.options;
  EXPECT_EQ(o.model_name, "m");
  EXPECT_EQ(o.dataset, "d.jsonl");
  EXPECT_EQ(o.max_seq_length, 2048);
  EXPECT_EQ(o.r, 16);
  EXPECT_DOUBLE_EQ(o.lora_alpha, 16);
  EXPECT_DOUBLE_EQ(o.learning_rate, 2e-4);
  EXPECT_EQ(o.optim, "adamw_torch");
  EXPECT_EQ(o.per_device_train_batch_size, 2);
  EXPECT_EQ(o.gradient_accumulation_steps, 4);
  EXPECT_TRUE(o.use_gradient_checkpointing);
  EXPECT_EQ(o.target_modules.size(), 7u);
  EXPECT_EQ(o.output_dir, "outputs");
}

TEST(OptionsTest, TableHasEveryGroupAndUniqueNames) {
  std::set<std::string> names, groups;
  for (const auto& spec : option_table()) {
    EXPECT_TRUE(names.insert(spec.name).second) << "duplicate option " << spec.name;
    groups.insert(spec.group);
    EXPECT_FALSE(spec.help.empty()) << spec.name;
    EXPECT_TRUE(spec.type == "int" || spec.type == "float" || spec.type == "bool" || spec.type == "string" ||
                spec.type == "list")
        << spec.name;
  }
  EXPECT_EQ(groups, (std::set<std::string>{"model", "LoRA", "training", "data", "saving", "logging", "distributed"}));
  EXPECT_TRUE(names.count("learning_rate"));
  EXPECT_TRUE(names.count("ddp_backend"));
}

TEST(OptionsTest, TableDefaultsAreAcceptedByTheirOwnBindings) {
  // Feeding every documented default back in must reproduce Options{} (modulo required fields).
  std::vector<std::string> args = {"--model_name", "m", "--dataset", "d"};
  for (const auto& spec : option_table()) {
    if (spec.name == "model_name" || spec.name == "dataset" || spec.default_value.empty()) continue;
    args.push_back("--" + spec.name + "=" + spec.default_value);
  }
  const Options o = parse_args(args).options;
  const Options d;
  EXPECT_EQ(o.r, d.r);
  EXPECT_DOUBLE_EQ(o.learning_rate, d.learning_rate);
  EXPECT_DOUBLE_EQ(o.adam_epsilon, d.adam_epsilon);
  EXPECT_EQ(o.target_modules, d.target_modules);
  EXPECT_EQ(o.lr_scheduler_type, d.lr_scheduler_type);
}

TEST(OptionsTest, ValueForms) {
  const Options o = parse_train({"--r", "8", "--lora_alpha=32", "--learning_rate", "1e-5", "--packing",
                                 "--shuffle", "false", "--group_by_length=1", "--use_gradient_checkpointing",
                                 "unsloth", "--target_modules", "q_proj, v_proj", "--max_steps", "-1",
                                 "--dtype", "bf16", "--optim", "adamw_torch_fused"})
                        .options;
  EXPECT_EQ(o.r, 8);
  EXPECT_DOUBLE_EQ(o.lora_alpha, 32);
  EXPECT_DOUBLE_EQ(o.learning_rate, 1e-5);
  EXPECT_TRUE(o.packing);
  EXPECT_FALSE(o.shuffle);
  EXPECT_TRUE(o.group_by_length);
  EXPECT_TRUE(o.use_gradient_checkpointing);
  EXPECT_EQ(o.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(o.max_steps, -1);
  EXPECT_EQ(o.dtype, "bfloat16");
  EXPECT_EQ(o.optim, "adamw_torch");
}

TEST(OptionsTest, SingleLetterOptionAcceptsBothSpellings) {
  EXPECT_EQ(parse_train({"--r=4"}).options.r, 4);
  EXPECT_EQ(parse_train({"--r", "5"}).options.r, 5);
  EXPECT_EQ(parse_train({"-r", "6"}).options.r, 6);
}

TEST(OptionsTest, GradientCheckpointingCanBeDisabled) {
  EXPECT_FALSE(parse_train({"--use_gradient_checkpointing", "false"}).options.use_gradient_checkpointing);
  EXPECT_FALSE(parse_train({"--use_gradient_checkpointing=0"}).options.use_gradient_checkpointing);
}

TEST(OptionsTest, AllLinearExpandsToEveryProjection) {
  EXPECT_EQ(parse_train({"--target_modules", "all-linear"}).options.target_modules, Options{}.target_modules);
}

TEST(OptionsTest, ActionWord) {
  EXPECT_EQ(parse_args({"eval", "--model_name", "m"}).action, "eval");
  EXPECT_EQ(parse_args({"train", "--model_name", "m", "--dataset", "d"}).action, "train");
  EXPECT_TRUE(contains(usage_error_of([] { parse_args({"predict", "--model_name", "m"}); }), "predict"));
  const std::string junk = usage_error_of([] { parse_train({"extra"}); });
  EXPECT_TRUE(contains(junk, "extra")) << junk;
  EXPECT_TRUE(contains(usage_error_of([] { parse_train({"--r", "8", "9"}); }), "\"9\""));
}

TEST(OptionsTest, RequiredOptions) {
  EXPECT_TRUE(contains(usage_error_of([] { parse_args({"--dataset", "d"}); }), "--model_name"));
  EXPECT_TRUE(contains(usage_error_of([] { parse_args({"--model_name", "m"}); }), "--dataset"));
}

TEST(OptionsTest, Help) {
  for (const char* flag : {"--help", "-h"}) {
    const Command c = parse_args({flag});
    EXPECT_TRUE(c.help);
    EXPECT_TRUE(contains(c.help_text, "--learning_rate"));
    EXPECT_TRUE(contains(c.help_text, "distributed:"));
    EXPECT_TRUE(contains(c.help_text, "FINETUNE_"));
  }
  // Groups appear in the agreed order.
  const std::string text = usage_text();
  EXPECT_LT(text.find("\nmodel:"), text.find("\nLoRA:"));
  EXPECT_LT(text.find("\nLoRA:"), text.find("\ntraining:"));
  EXPECT_LT(text.find("\nlogging:"), text.find("\ndistributed:"));
}

TEST(OptionsTest, PrecedenceFileThenEnvThenCli) {
  const std::string file = write_temp_file("precedence.json", R"({
    "model_name": "from_file", "dataset": "d.jsonl",
    "r": 4, "lora_alpha": 8, "learning_rate": 0.001,
    "target_modules": ["q_proj", "k_proj"], "packing": true
  })");
  const EnvMap env = {{"FINETUNE_LORA_ALPHA", "12"}, {"FINETUNE_LEARNING_RATE", "3e-4"},
                      {"FINETUNE_FIXTURES", "/not/an/option"}};
  const Command c = parse_args({"--config", file, "--learning_rate", "5e-5"}, env);
  EXPECT_EQ(c.config_file, file);
  EXPECT_EQ(c.options.model_name, "from_file");
  EXPECT_EQ(c.options.r, 4);                          // file only
  EXPECT_DOUBLE_EQ(c.options.lora_alpha, 12);          // env over file
  EXPECT_DOUBLE_EQ(c.options.learning_rate, 5e-5);     // CLI over env over file
  EXPECT_EQ(c.options.target_modules, (std::vector<std::string>{"q_proj", "k_proj"}));
  EXPECT_TRUE(c.options.packing);
}

TEST(OptionsTest, EnvironmentAlone) {
  const EnvMap env = {{"FINETUNE_MODEL_NAME", "m"}, {"FINETUNE_DATASET", "d"}, {"FINETUNE_R", "32"},
                      {"FINETUNE_TARGET_MODULES", "o_proj,down_proj"}, {"FINETUNE_PACKING", "1"}};
  const Options o = parse_args({}, env).options;
  EXPECT_EQ(o.r, 32);
  EXPECT_EQ(o.target_modules, (std::vector<std::string>{"o_proj", "down_proj"}));
  EXPECT_TRUE(o.packing);
  const std::string msg = usage_error_of([&] { parse_args({}, {{"FINETUNE_MODEL_NAME", "m"},
                                                               {"FINETUNE_DATASET", "d"},
                                                               {"FINETUNE_R", "zero"}}); });
  EXPECT_TRUE(contains(msg, "--r")) << msg;
  EXPECT_TRUE(contains(msg, "FINETUNE_R")) << msg;
}

TEST(OptionsTest, RepeatedFlagTakesTheLastValue) {  // argparse's rule
  EXPECT_DOUBLE_EQ(parse_train({"--learning_rate", "1", "--learning_rate=2"}).options.learning_rate, 2.0);
  EXPECT_EQ(parse_train({"--r", "1", "--r=2"}).options.r, 2);
  EXPECT_EQ(parse_train({"--r=2", "--r", "1"}).options.r, 1);
  EXPECT_TRUE(parse_train({"--packing", "false", "--packing"}).options.packing);
  EXPECT_FALSE(parse_train({"--packing", "--packing", "false"}).options.packing);
  // Each value is still validated, also the ones a later flag replaces.
  EXPECT_TRUE(contains(usage_error_of([] { parse_train({"--r", "0", "--r", "2"}); }), "--r"));
  EXPECT_TRUE(contains(usage_error_of([] { parse_train({"--config", "a.json", "--config", "b.json"}); }), "--config"));
}

TEST(OptionsTest, UnknownFlag) {
  EXPECT_TRUE(contains(usage_error_of([] { parse_train({"--learning-rate", "1"}); }), "learning-rate"));
}

TEST(OptionsTest, ConfigFileErrorsNameFileAndKey) {
  const std::string unknown = write_temp_file("unknown_key.json", R"({"model_name": "m", "lerning_rate": 1})");
  std::string msg = usage_error_of([&] { parse_args({"--config", unknown}); });
  EXPECT_TRUE(contains(msg, unknown) && contains(msg, "lerning_rate")) << msg;

  const std::string malformed = write_temp_file("malformed.json", R"({"model_name": "m",)");
  msg = usage_error_of([&] { parse_args({"--config", malformed}); });
  EXPECT_TRUE(contains(msg, malformed)) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  const std::string wrong_type = write_temp_file("wrong_type.json", R"({"model_name": "m", "r": [1]})");
  msg = usage_error_of([&] { parse_args({"--config", wrong_type}); });
  EXPECT_TRUE(contains(msg, wrong_type) && contains(msg, "r")) << msg;

  const std::string bad_value = write_temp_file("bad_value.json", R"({"model_name": "m", "dataset": "d", "r": 0})");
  msg = usage_error_of([&] { parse_args({"--config", bad_value}); });
  EXPECT_TRUE(contains(msg, "--r") && contains(msg, bad_value)) << msg;

  msg = usage_error_of([] { parse_args({"--config", "/nonexistent/cfg.json"}); });
  EXPECT_TRUE(contains(msg, "/nonexistent/cfg.json")) << msg;
}

// ~120 KB of nesting, as the whole file or as an option's value: a usage error naming the file.
TEST(OptionsTest, DeeplyNestedConfigFileIsAUsageError) {
  for (const char bracket : {'[', '{'}) {
    for (const std::string& text : {testing::nested_json(bracket),
                                    "{\"model_name\": \"m\", \"target_modules\": " + testing::nested_json(bracket) + "}"}) {
      const std::string path = write_temp_file("deep.json", text);
      const std::string msg = usage_error_of([&] { parse_args({"--config", path}); });
      EXPECT_TRUE(contains(msg, "--config: " + path + ": invalid JSON at line 1") && contains(msg, "nests deeper"))
          << msg;
    }
  }
}

struct BadValueCase {
  std::vector<std::string> args;
  std::string expected_in_message;
};

TEST(OptionsTest, InvalidValuesNameTheOption) {
  const std::vector<BadValueCase> cases = {
      {{"--r", "abc"}, "--r: expected an integer >= 1, got \"abc\""},
      {{"--r", "0"}, "--r: expected an integer >= 1"},
      {{"--r", "1.5"}, "--r: expected an integer"},
      {{"--lora_alpha", "0"}, "--lora_alpha: expected a number > 0"},
      {{"--lora_dropout", "1"}, "--lora_dropout: expected a number in [0, 1)"},
      {{"--lora_dropout", "-0.1"}, "--lora_dropout"},
      {{"--per_device_train_batch_size", "0"}, "--per_device_train_batch_size"},
      {{"--per_device_eval_batch_size", "0"}, "--per_device_eval_batch_size"},
      {{"--gradient_accumulation_steps", "0"}, "--gradient_accumulation_steps"},
      {{"--learning_rate", "0"}, "--learning_rate: expected a number > 0"},
      {{"--learning_rate", "fast"}, "--learning_rate"},
      {{"--warmup_ratio", "1"}, "--warmup_ratio"},
      {{"--max_seq_length", "1"}, "--max_seq_length: expected an integer >= 2"},
      {{"--logging_steps", "0"}, "--logging_steps"},
      {{"--dtype", "int8"}, "--dtype: unknown value \"int8\"; supported: auto, bfloat16, float16, float32"},
      {{"--device", "tpu"}, "--device"},
      {{"--optim", "sgd"}, "--optim: unknown value \"sgd\"; supported: adamw_torch"},
      {{"--optim", "adamw_8bit"}, "--optim: \"adamw_8bit\" is not supported"},
      {{"--lr_scheduler_type", "polynomial"}, "--lr_scheduler_type"},
      {{"--chat_template", "vicuna"}, "--chat_template"},
      {{"--save_method", "merged_4bit"}, "--save_method: \"merged_4bit\" is not supported"},
      {{"--save_method", "gguf_q4_k_m"}, "--save_method: \"gguf_q4_k_m\" is not supported"},
      {{"--bias", "all"}, "--bias: \"all\" is not supported (only none is supported)"},
      {{"--ddp_backend", "mpi"}, "--ddp_backend"},
      {{"--report_to", "wandb"}, "--report_to"},
      {{"--load_in_4bit"}, "--load_in_4bit: true is not supported"},
      {{"--load_in_4bit", "true"}, "--load_in_4bit: true is not supported"},
      {{"--packing", "maybe"}, "--packing"},
      {{"--packing=yes"}, "--packing: expected true, false, 1 or 0, got \"yes\""},
      {{"--target_modules", "q_proj,,v_proj"}, "--target_modules"},
      {{"--target_modules", "lm_head"}, "--target_modules: unknown module \"lm_head\""},
      {{"--output_dir", ""}, "--output_dir"},
      {{"--ddp_timeout", "0"}, "--ddp_timeout"},
      {{"--ddp_bucket_cap_mb", "0"}, "--ddp_bucket_cap_mb"},
      {{"--eval_split", "1.5"}, "--eval_split"},
      {{"--r"}, "r"},  // missing value
  };
  for (const auto& c : cases) {
    const std::string msg = usage_error_of([&] { parse_train(c.args); });
    EXPECT_TRUE(contains(msg, c.expected_in_message)) << "args " << c.args[0] << ": got \"" << msg << "\"";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(OptionsTest, LoadIn4bitFalseIsAccepted) {
  EXPECT_FALSE(parse_train({"--load_in_4bit", "false"}).options.load_in_4bit);
}

TEST(OptionsTest, CurrentEnvironmentSeesProcessVariables) {
  ::setenv("FINETUNE_TEST_OPTIONS_PROBE", "a=b", 1);
  const EnvMap env = current_environment();
  ::unsetenv("FINETUNE_TEST_OPTIONS_PROBE");
  ASSERT_TRUE(env.count("FINETUNE_TEST_OPTIONS_PROBE"));
  EXPECT_EQ(env.at("FINETUNE_TEST_OPTIONS_PROBE"), "a=b");
}

}  // namespace
}  // namespace finetune
