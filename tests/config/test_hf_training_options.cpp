// HF TrainingArguments' / TRL's training options: parsed, and their combinations checked as
// TrainingArguments.__post_init__ and EarlyStoppingCallback check them (a combination HF refuses,
// or one that would do nothing, is a UsageError naming the options); --bf16 / --fp16 as --dtype.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../test_support.h"
#include "finetune/util/errors.h"
#include "option_test_helpers.h"

namespace finetune {
namespace {

using testing::parse_args;
using testing::parse_train;

std::string refusal(const std::vector<std::string>& args) {
  return ::finetune::testing::error_message([&] { parse_train(args); });
}

TEST(HfTrainingOptions, StrategiesBestModelAndEarlyStoppingParse) {
  const auto o = parse_train({"--eval_strategy", "steps", "--eval_steps", "2", "--save_steps", "4",
                              "--load_best_model_at_end", "--metric_for_best_model", "loss", "--greater_is_better",
                              "false", "--early_stopping_patience", "3", "--early_stopping_threshold", "0.01"})
                     .options;
  EXPECT_EQ(o.eval_strategy, "steps");
  EXPECT_TRUE(o.load_best_model_at_end);
  EXPECT_EQ(o.metric_for_best_model, "eval_loss");  // HF prefixes eval_ to a metric name
  EXPECT_EQ(o.early_stopping_patience, 3);
  EXPECT_DOUBLE_EQ(o.early_stopping_threshold, 0.01);
  const auto epochs = parse_train({"--eval_strategy", "epoch", "--save_strategy", "epoch", "--load_best_model_at_end"});
  EXPECT_EQ(epochs.options.save_strategy, "epoch");
  // HF's defaults: finetune evaluates and saves on the steps strategy, nothing best-model.
  const auto defaults = parse_train({}).options;
  EXPECT_EQ(defaults.eval_strategy, "steps");
  EXPECT_EQ(defaults.save_strategy, "steps");
  EXPECT_FALSE(defaults.load_best_model_at_end);
  EXPECT_EQ(defaults.early_stopping_patience, 0);
}

TEST(HfTrainingOptions, CombinationsHfRefusesAreUsageErrors) {
  testing::expect_contains(refusal({"--save_strategy", "epoch", "--save_steps", "2"}),
                           {"--save_steps: read only with --save_strategy steps (got epoch)"});
  testing::expect_contains(refusal({"--load_best_model_at_end", "--eval_strategy", "epoch"}),
                           {"--load_best_model_at_end", "--eval_strategy and --save_strategy to match", "epoch and steps"});
  testing::expect_contains(refusal({"--load_best_model_at_end", "--eval_steps", "3", "--save_steps", "4"}),
                           {"--load_best_model_at_end", "--save_steps (4) must be a positive multiple of --eval_steps (3)"});
  testing::expect_contains(refusal({"--load_best_model_at_end", "--eval_strategy", "no", "--save_strategy", "no"}),
                           {"--load_best_model_at_end: needs evaluations and checkpoints"});
  testing::expect_contains(refusal({"--early_stopping_patience", "2", "--eval_strategy", "no"}),
                           {"--early_stopping_patience: needs evaluations"});
  testing::expect_contains(refusal({"--early_stopping_threshold", "0.1"}),
                           {"--early_stopping_threshold: does nothing without --early_stopping_patience"});
  testing::expect_contains(refusal({"--eval_strategy", "epoch", "--eval_steps", "5"}),
                           {"--eval_steps: read only with --eval_strategy steps (got epoch)"});
  testing::expect_contains(refusal({"--save_only_model"}), {"--save_only_model: does nothing without checkpoints"});
  EXPECT_TRUE(parse_train({"--save_only_model", "--save_steps", "5"}).options.save_only_model);
  EXPECT_TRUE(parse_train({"--save_only_model", "--save_strategy", "epoch"}).options.save_only_model);
}

TEST(HfTrainingOptions, Bf16AndFp16AreDtypeAliases) {
  EXPECT_EQ(parse_train({"--bf16"}).options.dtype, "bfloat16");
  EXPECT_EQ(parse_train({"--fp16", "true"}).options.dtype, "float16");
  EXPECT_EQ(parse_train({"--bf16", "--dtype", "bf16"}).options.dtype, "bfloat16");
  EXPECT_EQ(parse_train({"--bf16", "--dtype", "None"}).options.dtype, "bfloat16");  // auto: the flag decides
  EXPECT_EQ(parse_train({"--bf16", "false"}).options.dtype, "auto");
  EXPECT_EQ(parse_args({"eval", "--model_name", "m", "--dataset", "d.jsonl", "--fp16"}).options.dtype, "float16");
  testing::expect_contains(refusal({"--bf16", "--fp16"}), {"--bf16 and --fp16: give one"});
  testing::expect_contains(refusal({"--fp16", "--dtype", "float32"}), {"--fp16 and --dtype float32 disagree"});
}

TEST(HfTrainingOptions, SchedulesOptimizersAndRunName) {
  const auto o = parse_train({"--lr_scheduler_type", "cosine_with_restarts", "--lr_scheduler_kwargs",
                              "{\"num_cycles\": 3}", "--optim", "paged_adamw_32bit", "--run_name", "ablation-1"})
                     .options;
  EXPECT_EQ(o.lr_scheduler_type, "cosine_with_restarts");
  EXPECT_EQ(o.lr_scheduler_kwargs, "{\"num_cycles\": 3}");
  EXPECT_EQ(o.optim, "adamw_torch");  // bitsandbytes' 32-bit AdamW: AdamW's update (test_sgd_adafactor.cpp)
  EXPECT_EQ(o.run_name, "ablation-1");
  EXPECT_EQ(parse_train({"--optim", "sgd"}).options.optim, "sgd");
  EXPECT_EQ(parse_train({"--optim", "adafactor"}).options.optim, "adafactor");
  for (const auto& type : {"polynomial", "inverse_sqrt", "cosine_with_min_lr", "warmup_stable_decay"}) {
    EXPECT_EQ(parse_train({"--lr_scheduler_type", type}).options.lr_scheduler_type, type);
  }
}

TEST(HfTrainingOptions, OptionsNotOfferedAreRefusedWithTheReason) {
  testing::expect_contains(refusal({"--modules_to_save", "embed_tokens,lm_head"}),
                           {"--modules_to_save", "\"lm_head\"", "no gradient for the head weight"});
  testing::expect_contains(refusal({"--modules_to_save", "norm"}), {"--modules_to_save", "\"norm\""});
  EXPECT_TRUE(parse_train({"--modules_to_save", "None"}).options.modules_to_save.empty());
}

// TRL's NEFTune (model/embedding_noise.h): None and 0 are off; only what TRL could run is accepted.
TEST(HfTrainingOptions, NeftuneNoiseAlphaParsesAndRefusesWhatTrlCannotMatch) {
  EXPECT_DOUBLE_EQ(parse_train({"--neftune_noise_alpha", "5"}).options.neftune_noise_alpha, 5.0);
  EXPECT_DOUBLE_EQ(parse_train({"--neftune_noise_alpha", "None"}).options.neftune_noise_alpha, 0.0);
  EXPECT_DOUBLE_EQ(parse_train({"--neftune_noise_alpha", "0"}).options.neftune_noise_alpha, 0.0);
  EXPECT_DOUBLE_EQ(parse_train({}).options.neftune_noise_alpha, 0.0);
  EXPECT_NO_THROW(parse_train({"--neftune_noise_alpha", "5", "--step_planning", "literal"}));
  EXPECT_NO_THROW(parse_train({"--neftune_noise_alpha", "0", "--packing", "true"}));
  testing::expect_contains(refusal({"--neftune_noise_alpha", "-1"}), {"--neftune_noise_alpha"});
  testing::expect_contains(refusal({"--neftune_noise_alpha", "5", "--packing", "true"}),
                           {"--neftune_noise_alpha: not with --packing true", "padded"});
  testing::expect_contains(refusal({"--neftune_noise_alpha", "5", "--step_planning", "balanced"}),
                           {"--neftune_noise_alpha: needs --step_planning literal"});
}

TEST(HfTrainingOptions, PeftBiasAndModulesToSaveParse) {
  EXPECT_EQ(parse_train({"--modules_to_save", "embed_tokens"}).options.modules_to_save,
            std::vector<std::string>{"embed_tokens"});
  for (const char* bias : {"none", "all", "lora_only"}) EXPECT_EQ(parse_train({"--bias", bias}).options.bias, bias);
}

}  // namespace
}  // namespace finetune
