// Option table and layered parsing: defaults, every value form, precedence file < env < CLI,
// duplicates, unknown keys and out-of-range values (each an error naming the option).
#include <gtest/gtest.h>

#include "../test_support.h"

#include <algorithm>
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
  EXPECT_EQ(c.action, Action::Train);
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
  // Unsloth's seven projections, then the other families' names (Phi-3's fused qkv_proj,
  // gate_up_proj): a fresh adapter takes the model's own (setup_adapter), on Llama Unsloth's seven.
  const std::vector<std::string> unsloth = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  ASSERT_GE(o.target_modules.size(), 7u);
  EXPECT_EQ(std::vector<std::string>(o.target_modules.begin(), o.target_modules.begin() + 7), unsloth);
  EXPECT_EQ(o.output_dir, "outputs");
  EXPECT_EQ(o.dtype, "auto");                // Unsloth: None (auto-detect)
  EXPECT_EQ(o.save_method, "merged_16bit");  // Unsloth's --save_method default
  EXPECT_FALSE(o.save_model);
  EXPECT_EQ(o.dataset_split, "train");       // Unsloth loads split="train"
  EXPECT_FALSE(o.use_dora);
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
  EXPECT_EQ(groups, (std::set<std::string>{"model", "LoRA", "training", "preference", "data", "saving", "generation",
                                           "logging", "distributed"}));
  EXPECT_TRUE(names.count("learning_rate"));
  EXPECT_TRUE(names.count("ddp_backend"));
}

TEST(OptionsTest, TableDefaultsAreAcceptedByTheirOwnBindings) {
  // Feeding every documented default back in must reproduce Options{} (modulo required fields).
  std::vector<std::string> args = {"--model_name", "m", "--dataset", "d"};
  for (const auto& spec : option_table()) {
    if (spec.name == "model_name" || spec.name == "dataset" || spec.default_value.empty() ||
        !spec.read_by(Action::Train))
      continue;
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

// An empty default (target_parameters' "") is accepted back too, as the option file fuzzer's seed
// with every option at its default gives it; None names no expert tensors, as in PEFT.
TEST(OptionsTest, EmptyAndNoneTargetParametersMeanNone) {
  for (const char* value : {"", "None", "null"}) {
    EXPECT_TRUE(parse_train({"--target_parameters", value}).options.target_parameters.empty()) << value;
  }
  EXPECT_EQ(parse_train({"--target_parameters", "mlp.experts.down_proj"}).options.target_parameters,
            std::vector<std::string>{"mlp.experts.down_proj"});
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
  // HF's spellings of bitsandbytes' 8-bit AdamW; paging does not change the update.
  for (const char* alias : {"adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "ADAMW_8BIT"}) {
    EXPECT_EQ(parse_train({"--optim", alias}).options.optim, "adamw_8bit") << alias;
  }
}

TEST(OptionsTest, SingleLetterOptionAcceptsBothSpellings) {
  EXPECT_EQ(parse_train({"--r=4"}).options.r, 4);
  EXPECT_EQ(parse_train({"--r", "5"}).options.r, 5);
  EXPECT_EQ(parse_train({"-r", "6"}).options.r, 6);
}

TEST(OptionsTest, LoraRIsAnAliasOfR) {
  EXPECT_EQ(parse_train({"--lora_r", "8"}).options.r, 8);
  EXPECT_EQ(parse_train({"--lora_r=9"}).options.r, 9);
  // One option under two names: the last occurrence wins, whichever name it uses.
  EXPECT_EQ(parse_train({"--r", "4", "--lora_r", "8"}).options.r, 8);
  EXPECT_EQ(parse_train({"--lora_r", "8", "--r", "4"}).options.r, 4);
  EXPECT_EQ(parse_train({}, {{"FINETUNE_LORA_R", "32"}}).options.r, 32);
  EXPECT_EQ(parse_train({"--r", "2"}, {{"FINETUNE_LORA_R", "32"}}).options.r, 2);  // CLI over env, across names
  EXPECT_TRUE(parse_train({"--lora_r", "8"}).options.given.count("r"));
  const std::string file = write_temp_file("lora_r.json", R"({"model_name": "m", "dataset": "d", "lora_r": 4})");
  EXPECT_EQ(parse_args({"--config", file}).options.r, 4);
  // The error names the option as it was given.
  const std::string msg = usage_error_of([] { parse_train({"--lora_r", "0"}); });
  EXPECT_TRUE(contains(msg, "--lora_r: expected an integer >= 1")) << msg;
  EXPECT_TRUE(contains(usage_text(Action::Train), "--r, --lora_r <int>"));
}

TEST(OptionsTest, TwoNamesOfOneOptionInOneUnorderedSourceAreAnError) {
  const std::string file = write_temp_file("r_twice.json", R"({"model_name": "m", "dataset": "d", "r": 4, "lora_r": 8})");
  std::string msg = usage_error_of([&] { parse_args({"--config", file}); });
  EXPECT_TRUE(contains(msg, file + ": lora_r and " + file + ": r both set --r")) << msg;
  msg = usage_error_of([] { parse_train({}, {{"FINETUNE_R", "4"}, {"FINETUNE_LORA_R", "8"}}); });
  EXPECT_TRUE(contains(msg, "FINETUNE_R and FINETUNE_LORA_R both set --r")) << msg;
}

TEST(OptionsTest, UnslothSpellingsOfAuto) {
  EXPECT_EQ(parse_train({"--dtype", "None"}).options.dtype, "auto");
  EXPECT_EQ(parse_train({"--dtype", "none"}).options.dtype, "auto");
  EXPECT_EQ(parse_train({}, {{"FINETUNE_DTYPE", "None"}}).options.dtype, "auto");
  EXPECT_EQ(parse_train({"--dtype", "bfloat16"}).options.dtype, "bfloat16");  // today's spellings stay
  EXPECT_EQ(parse_train({"--dtype", "fp16"}).options.dtype, "float16");
  EXPECT_EQ(parse_train({"--dtype", "auto"}).options.dtype, "auto");
}

TEST(OptionsTest, UnslothNoOpsAreAccepted) {
  const Options o = parse_train({"--use_dora", "false", "--loftq_config", "None"}).options;
  EXPECT_FALSE(o.use_dora);
  EXPECT_NO_THROW(parse_train({"--loftq_config", "none"}));
  EXPECT_NO_THROW(parse_train({"--loftq_config="}));
  EXPECT_NO_THROW(parse_train({"--use_dora=0"}));
  const std::string file =
      write_temp_file("unsloth_noops.json", R"({"model_name": "m", "dataset": "d", "use_dora": false, "loftq_config": "None"})");
  EXPECT_NO_THROW(parse_args({"--config", file}));
}

TEST(OptionsTest, UseDoraIsABoolean) {
  EXPECT_TRUE(parse_train({"--use_dora"}).options.use_dora);
  EXPECT_TRUE(parse_train({"--use_dora", "true"}).options.use_dora);
  EXPECT_FALSE(parse_train({"--use_dora", "false"}).options.use_dora);
  EXPECT_THROW(parse_train({"--use_dora", "maybe"}), UsageError);
}

TEST(OptionsTest, UnsupportedUnslothFeaturesSayWhy) {
  std::string msg = usage_error_of([] { parse_train({"--loftq_config", "{\"loftq_bits\": 4}"}); });
  EXPECT_TRUE(contains(msg, "--loftq_config:") && contains(msg, "LoftQ initialisation is not implemented")) << msg;
  msg = usage_error_of([] { parse_train({"--report_to", "wandb"}); });
  EXPECT_TRUE(contains(msg, "--report_to: \"wandb\" is not supported (finetune writes TensorBoard event files"))
      << msg;
  EXPECT_EQ(parse_train({"--report_to", "tensorboard"}).options.report_to, "tensorboard");
  EXPECT_EQ(parse_train({"--report_to", "all"}).options.report_to, "all");
}

TEST(OptionsTest, UnslothOptionsFinetuneLacksAreNamedWithAReason) {
  std::string msg = usage_error_of([] { parse_train({"--adapter_file", "a.safetensors"}); });
  EXPECT_TRUE(contains(msg, "--adapter_file: an option of Unsloth's CLI that finetune does not have") &&
              contains(msg, "an MLX option"))
      << msg;
  const auto pushed = parse_train({"--save_model", "--save_method", "gguf", "--push_gguf", "--hub_path", "me/tuned-gguf"});
  EXPECT_TRUE(pushed.options.push_gguf);  // Unsloth's store_true; the repo is --hub_path
  EXPECT_EQ(pushed.options.hub_path, "me/tuned-gguf");
  msg = usage_error_of([] { parse_train({"--save_method", "gguf", "--push_gguf", "--hub_path", "me/tuned-gguf"}); });
  EXPECT_TRUE(contains(msg, "--push_gguf") && contains(msg, "--save_model")) << msg;
  EXPECT_TRUE(parse_train({"--save_model", "--save_gguf"}).options.save_gguf);
  EXPECT_EQ(parse_train({"--quantization", "q8_0"}).options.quantization, "q8_0");
  EXPECT_EQ(parse_train({"--quantization", "F16, not_quantized,fast_quantized"}).options.quantization, "f16,f16,q8_0");
  msg = usage_error_of([] { parse_train({"--quantization", "q3_k_s"}); });
  EXPECT_TRUE(contains(msg, "--quantization") && contains(msg, "q3_k_s")) << msg;
}

TEST(OptionsTest, UnknownNamesGetTheNearestOption) {
  std::string msg = usage_error_of([] { parse_train({"--lerning_rate", "1"}); });
  EXPECT_TRUE(contains(msg, "--lerning_rate: unknown option; did you mean --learning_rate?")) << msg;
  const std::string file = write_temp_file("typo_key.json", R"({"model_name": "m", "lora_alpah": 1})");
  msg = usage_error_of([&] { parse_args({"--config", file}); });
  EXPECT_TRUE(contains(msg, "did you mean --lora_alpha?")) << msg;
  msg = usage_error_of([] { parse_train({"--completely_unrelated", "1"}); });
  EXPECT_FALSE(contains(msg, "did you mean")) << msg;
}

TEST(OptionsTest, DatasetSplitTakesSplitNames) {
  EXPECT_EQ(parse_train({"--dataset_split", "validation"}).options.dataset_split, "validation");
  EXPECT_EQ(parse_train({"--dataset_split", "test.v2"}).options.dataset_split, "test.v2");
  for (const char* bad : {"train[:10%]", "train+test", "", "my-split", "a..b"}) {
    const std::string msg = usage_error_of([&] { parse_train({"--dataset_split", bad}); });
    EXPECT_TRUE(contains(msg, "--dataset_split: expected a split name")) << bad << ": " << msg;
  }
}

TEST(OptionsTest, GradientCheckpointingCanBeDisabled) {
  EXPECT_FALSE(parse_train({"--use_gradient_checkpointing", "false"}).options.use_gradient_checkpointing);
  EXPECT_FALSE(parse_train({"--use_gradient_checkpointing=0"}).options.use_gradient_checkpointing);
}

TEST(OptionsTest, AllLinearExpandsToEveryProjection) {
  EXPECT_EQ(parse_train({"--target_modules", "all-linear"}).options.target_modules, Options{}.target_modules);
}

TEST(OptionsTest, ActionWord) {
  EXPECT_EQ(parse_args({"eval", "--model_name", "m"}).action, Action::Eval);
  EXPECT_EQ(parse_args({"train", "--model_name", "m", "--dataset", "d"}).action, Action::Train);
  for (const auto& info : action_table()) EXPECT_EQ(action_name(info.action), info.name);
  EXPECT_EQ(action_names(),
            (std::vector<std::string>{"train", "eval", "generate", "chat", "export", "dpo", "orpo", "plot"}));
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
    const Command c = parse_args({"train", flag});
    EXPECT_TRUE(c.help);
    EXPECT_TRUE(contains(c.help_text, "Usage: finetune [train] --model_name M --dataset D"));
    EXPECT_TRUE(contains(c.help_text, "--learning_rate"));
    EXPECT_TRUE(contains(c.help_text, "distributed:"));
    EXPECT_TRUE(contains(c.help_text, "FINETUNE_"));
  }
  // Groups appear in the agreed order.
  const std::string text = usage_text(Action::Train);
  EXPECT_LT(text.find("\nmodel:"), text.find("\nLoRA:"));
  EXPECT_LT(text.find("\nLoRA:"), text.find("\ntraining:"));
  EXPECT_LT(text.find("\nlogging:"), text.find("\ndistributed:"));
}

TEST(OptionsTest, TopLevelHelpListsTheCommands) {
  for (const char* flag : {"--help", "-h"}) {
    const Command c = parse_args({flag});
    EXPECT_TRUE(c.help);
    EXPECT_EQ(c.help_text, usage_text());
  }
  const std::string text = usage_text();
  EXPECT_TRUE(contains(text, "Usage: finetune [train|eval|generate|chat|export|dpo|orpo|plot] ")) << text;
  for (const auto& info : action_table()) EXPECT_TRUE(contains(text, "\n  " + info.name + " ")) << info.name;
  EXPECT_TRUE(contains(text, "finetune COMMAND --help"));
  EXPECT_FALSE(contains(text, "--learning_rate"));  // the options are each command's own help
}

// `finetune plot` reads none of the table's options: its words (run directories, --out, --help)
// are handed over whole (commands/plot_command.h parses them, and prints its own help).
TEST(OptionsTest, PlotTakesItsOwnWords) {
  const Command c = parse_args({"plot", "runs/a", "runs/b", "--out", "r.html", "--help"});
  EXPECT_EQ(c.action, Action::Plot);
  EXPECT_FALSE(c.help);
  EXPECT_EQ(c.plot_words, (std::vector<std::string>{"runs/a", "runs/b", "--out", "r.html", "--help"}));
  for (const auto& spec : option_table()) EXPECT_FALSE(spec.read_by(Action::Plot)) << spec.name;
}

TEST(OptionsTest, EachCommandsHelpListsOnlyItsOptions) {
  for (const auto& info : action_table()) {
    if (info.action == Action::Plot) continue;  // PlotTakesItsOwnWords
    SCOPED_TRACE(info.name);
    const Command c = parse_args({info.name, "--help"});
    ASSERT_TRUE(c.help);
    EXPECT_EQ(c.help_text, usage_text(info.action));
    EXPECT_TRUE(contains(c.help_text, "Usage: " + info.usage + "\n"));
    for (const auto& spec : option_table()) {
      EXPECT_EQ(contains(c.help_text, "  --" + spec.name + " ") || contains(c.help_text, "  --" + spec.name + ","),
                spec.read_by(info.action))
          << spec.name;
    }
  }
  const std::string export_help = usage_text(Action::Export);
  EXPECT_TRUE(contains(export_help, "--save_method") && contains(export_help, "--adapter <string>"));
  EXPECT_FALSE(contains(export_help, "--learning_rate") || contains(export_help, "--init_adapter"));
  EXPECT_FALSE(contains(export_help, "\ntraining:"));  // a group with none of its options is left out
}

TEST(OptionsTest, PreferenceOptionsAreReadByTheirCommandsOnly) {
  const Command dpo = parse_args({"dpo", "--model_name", "m", "--dataset", "d", "--beta", "0.2", "--loss_type", "ipo",
                                  "--max_length", "64", "--truncation_mode", "keep_end", "--precompute_ref_log_probs"});
  EXPECT_EQ(dpo.action, Action::Dpo);
  EXPECT_DOUBLE_EQ(dpo.options.beta, 0.2);
  EXPECT_EQ(dpo.options.loss_type, "ipo");
  EXPECT_EQ(dpo.options.max_seq_length, 64);  // TRL's max_length is --max_seq_length
  EXPECT_EQ(dpo.options.truncation_mode, "keep_end");
  EXPECT_TRUE(dpo.options.precompute_ref_log_probs);
  EXPECT_EQ(parse_args({"orpo", "--model_name", "m", "--dataset", "d", "--beta", "0.5"}).options.beta, 0.5);
  std::string msg = usage_error_of([] { parse_train({"--beta", "0.1"}); });
  EXPECT_TRUE(contains(msg, "--beta is not an option of `finetune train` (it is read by dpo, orpo")) << msg;
  msg = usage_error_of([] { parse_args({"orpo", "--model_name", "m", "--dataset", "d", "--loss_type", "ipo"}); });
  EXPECT_TRUE(contains(msg, "--loss_type is not an option of `finetune orpo` (it is read by dpo")) << msg;
  msg = usage_error_of([] { parse_args({"dpo", "--model_name", "m", "--dataset", "d", "--packing"}); });
  EXPECT_TRUE(contains(msg, "--packing is not an option of `finetune dpo` (it is read by train")) << msg;
  msg = usage_error_of([] { parse_args({"dpo", "--model_name", "m", "--dataset", "d", "--label_smoothing", "0.1"}); });
  EXPECT_TRUE(contains(msg, "--label_smoothing: read by --loss_type robust only")) << msg;
  EXPECT_EQ(parse_args({"dpo", "--model_name", "m", "--dataset", "d", "--loss_type", "robust", "--label_smoothing",
                        "0.1"}).options.label_smoothing, 0.1);
  msg = usage_error_of([] { parse_args({"dpo", "--model_name", "m", "--dataset", "d", "--loss_type", "robust",
                                        "--label_smoothing", "0.5"}); });
  EXPECT_TRUE(contains(msg, "--label_smoothing")) << msg;  // robust needs e < 0.5 (TRL divides by 1 - 2e)
  msg = usage_error_of([] { parse_args({"dpo", "--model_name", "m", "--loss_type", "kto"}); });
  EXPECT_TRUE(contains(msg, "--loss_type")) << msg;
  msg = usage_error_of([] { parse_args({"dpo", "--model_name", "m"}); });
  EXPECT_TRUE(contains(msg, "--dataset: required for dpo")) << msg;
}

TEST(OptionsTest, VersionFlag) {
  EXPECT_TRUE(parse_args({"--version"}).version);
  EXPECT_TRUE(parse_args({"export", "--version"}).version);
  EXPECT_FALSE(parse_train({}).version);
}

TEST(OptionsTest, EveryOptionIsReadBySomeCommand) {
  for (const auto& spec : option_table()) {
    EXPECT_FALSE(spec.commands.empty()) << spec.name;
    for (const auto& info : action_table()) {
      const auto listed = std::count(spec.commands.begin(), spec.commands.end(), info.action);
      EXPECT_EQ(listed, spec.read_by(info.action) ? 1 : 0) << spec.name << " " << info.name;
    }
  }
  // Spot checks of the table against what the commands read (src/commands/).
  const auto readers = [](const std::string& name) {
    for (const auto& spec : option_table())
      if (spec.name == name) return spec.commands;
    ADD_FAILURE() << "no option " << name;
    return std::vector<Action>{};
  };
  EXPECT_EQ(readers("model_name"), (std::vector<Action>{Action::Train, Action::Eval, Action::Generate, Action::Chat,
                                                       Action::Export, Action::Dpo, Action::Orpo}));
  EXPECT_EQ(readers("init_adapter"), (std::vector<Action>{Action::Train, Action::Eval, Action::Dpo, Action::Orpo}));
  EXPECT_EQ(readers("adapter"), (std::vector<Action>{Action::Eval, Action::Generate, Action::Chat, Action::Export}));
  EXPECT_EQ(readers("learning_rate"), (std::vector<Action>{Action::Train, Action::Dpo, Action::Orpo}));
  EXPECT_EQ(readers("packing"), std::vector<Action>{Action::Train});
  EXPECT_EQ(readers("beta"), (std::vector<Action>{Action::Dpo, Action::Orpo}));
  EXPECT_EQ(readers("loss_type"), std::vector<Action>{Action::Dpo});
  EXPECT_EQ(readers("dump_logits"), std::vector<Action>{Action::Eval});
  EXPECT_EQ(readers("save_method"), (std::vector<Action>{Action::Train, Action::Export, Action::Dpo, Action::Orpo}));
}

TEST(OptionsTest, AnOptionTheCommandDoesNotReadIsAUsageErrorNamingTheCommand) {
  std::string msg = usage_error_of([] { parse_train({"--adapter", "X"}); });
  EXPECT_EQ(msg, "--adapter is not an option of `finetune train` (it is read by eval, generate, chat, export; "
                 "did you mean --init_adapter?)");
  msg = usage_error_of([] { parse_args({"generate", "--model_name", "m", "--prompt", "p", "--init_adapter", "X"}); });
  EXPECT_EQ(msg, "--init_adapter is not an option of `finetune generate` (it is read by train, eval, dpo, orpo; did "
                 "you mean --adapter?)");
  msg = usage_error_of([] { parse_args({"export", "--model_name", "m", "--learning_rate", "1e-4"}); });
  EXPECT_TRUE(contains(msg, "--learning_rate is not an option of `finetune export` (it is read by train")) << msg;
  // Named as typed (an alias), and refused before its value is looked at.
  msg = usage_error_of([] { parse_args({"chat", "--model_name", "m", "--lora_r", "zero"}); });
  EXPECT_TRUE(contains(msg, "--lora_r is not an option of `finetune chat`")) << msg;
  msg = usage_error_of([] { parse_args({"eval", "--model_name", "m", "--dataset", "d", "--prompt", "p"}); });
  EXPECT_TRUE(contains(msg, "--prompt is not an option of `finetune eval` (it is read by generate)")) << msg;
}

TEST(OptionsTest, FileAndEnvironmentSettingsTheCommandDoesNotReadAreIgnoredAndNoted) {
  const std::string file = write_temp_file("shared.json", R"({"model_name": "m", "dataset": "d", "learning_rate": 0.5,
                                                               "max_new_tokens": 7, "dump_logits": "x"})");
  const Command generate = parse_args({"generate", "--config", file, "--prompt", "p"}, {{"FINETUNE_R", "8"}});
  EXPECT_EQ(generate.options.max_new_tokens, 7);
  EXPECT_DOUBLE_EQ(generate.options.learning_rate, Options{}.learning_rate);  // not bound
  EXPECT_EQ(generate.options.r, Options{}.r);
  EXPECT_FALSE(generate.options.given.count("learning_rate") || generate.options.given.count("r") ||
               generate.options.given.count("dataset"));
  EXPECT_EQ(generate.ignored_settings,
            (std::vector<std::string>{file + ": dataset: not read by `finetune generate`; ignored",
                                      file + ": dump_logits: not read by `finetune generate`; ignored",
                                      file + ": learning_rate: not read by `finetune generate`; ignored",
                                      "FINETUNE_R: not read by `finetune generate`; ignored"}));
  const Command train = parse_args({"--config", file});
  EXPECT_DOUBLE_EQ(train.options.learning_rate, 0.5);
  EXPECT_EQ(train.options.max_new_tokens, Options{}.max_new_tokens);
  // An ignored value is not validated either: it belongs to another command.
  EXPECT_NO_THROW(parse_args({"export", "--model_name", "m", "--save_method", "gguf"}, {{"FINETUNE_R", "zero"}}));
  // Unknown keys and variables stay errors for every command.
  const std::string typo = write_temp_file("shared_typo.json", R"({"model_name": "m", "lerning_rate": 1})");
  EXPECT_THROW(parse_args({"chat", "--config", typo}), UsageError);
}

TEST(OptionsTest, EvalReadsAdapterAndInitAdapterAsOneSetting) {
  EXPECT_EQ(parse_args({"eval", "--model_name", "m", "--dataset", "d", "--adapter", "a"}).options.adapter, "a");
  EXPECT_EQ(parse_args({"eval", "--model_name", "m", "--dataset", "d", "--init_adapter", "a"}).options.init_adapter, "a");
  const std::string msg =
      usage_error_of([] { parse_args({"eval", "--model_name", "m", "--dataset", "d", "--adapter", "a", "--init_adapter", "b"}); });
  EXPECT_TRUE(contains(msg, "--adapter and --init_adapter") && contains(msg, "`finetune eval`")) << msg;
}

TEST(OptionsTest, ListOptionsTakeSpaceSeparatedValuesAsArgparsesNargsPlus) {
  const Options o = parse_train({"--save_model", "--save_gguf", "--quantization", "f16", "q8_0", "--target_modules",
                                 "q_proj", "v_proj", "--r", "4"}).options;
  EXPECT_EQ(o.quantization, "f16,q8_0");
  EXPECT_EQ(o.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(o.r, 4);
  // The comma form stays, and both mix.
  EXPECT_EQ(parse_train({"--target_modules", "q_proj,k_proj", "o_proj"}).options.target_modules,
            (std::vector<std::string>{"q_proj", "k_proj", "o_proj"}));
  // A bad item is named; a bare word after a non-list option is still an error.
  EXPECT_TRUE(contains(usage_error_of([] { parse_train({"--quantization", "f16", "q3_k_s"}); }), "q3_k_s"));
  EXPECT_TRUE(contains(usage_error_of([] { parse_train({"--learning_rate", "1e-4", "2e-4"}); }), "\"2e-4\""));
}

TEST(OptionsTest, SaveGgufNeedsSaveModelInTrain) {
  const std::string msg = usage_error_of([] { parse_train({"--save_gguf"}); });
  EXPECT_TRUE(contains(msg, "--save_gguf") && contains(msg, "--save_model")) << msg;
  EXPECT_NO_THROW(parse_args({"export", "--model_name", "m", "--save_method", "merged_16bit", "--save_gguf"}));
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

TEST(OptionsTest, UnknownFinetuneVariableIsAnErrorWithASuggestion) {
  std::string msg = usage_error_of([] { parse_train({}, {{"FINETUNE_LORA_ALPA", "32"}}); });
  EXPECT_TRUE(contains(msg, "FINETUNE_LORA_ALPA: unknown environment variable")) << msg;
  EXPECT_TRUE(contains(msg, "did you mean FINETUNE_LORA_ALPHA?")) << msg;
  msg = usage_error_of([] { parse_train({}, {{"FINETUNE_NOT_AN_OPTION", "1"}}); });
  EXPECT_TRUE(contains(msg, "FINETUNE_NOT_AN_OPTION")) << msg;
  EXPECT_FALSE(contains(msg, "did you mean")) << msg;
  // A typo of a script's variable is suggested too.
  msg = usage_error_of([] { parse_train({}, {{"FINETUNE_FIXTURE", "/f"}}); });
  EXPECT_TRUE(contains(msg, "did you mean FINETUNE_FIXTURES?")) << msg;
  // The eval action checks it too; --help does not (it always works).
  EXPECT_THROW(parse_args({"eval", "--model_name", "m"}, {{"FINETUNE_X", "1"}}), UsageError);
  EXPECT_TRUE(parse_args({"--help"}, {{"FINETUNE_X", "1"}}).help);
  // Variables of other programs are none of finetune's business.
  EXPECT_NO_THROW(parse_train({}, {{"FINETUNED", "1"}, {"MY_FINETUNE_X", "1"}, {"HF_HOME", "/h"}}));
}

TEST(OptionsTest, VariablesTheProjectScriptsExportAreTolerated) {
  // scripts/setup.sh (build/env.sh), scripts/test.sh, scripts/demo.sh: the binary runs under them.
  const EnvMap env = {{"FINETUNE_ROOT", "/r"},          {"FINETUNE_BUILD_DIR", "/b"}, {"FINETUNE_PYTHON", "/p"},
                      {"FINETUNE_BIN", "/b/finetune"},   {"FINETUNE_VENV", "/v"},      {"FINETUNE_SKIP_APT", "1"},
                      {"FINETUNE_CMAKE_ARGS", "-DX=1"},  {"FINETUNE_JOBS", "1"},       {"FINETUNE_FIXTURES", "/f"},
                      {"FINETUNE_PYTEST_ARGS", "-x"},    {"FINETUNE_FUZZ_SECONDS", "3"}, {"FINETUNE_SKIP_SETUP", "1"},
                      {"FINETUNE_DEMO_DIR", "/d"},       {"FINETUNE_LOG_LEVEL", "warn"},
                      {"FINETUNE_LLAMA_LORA_LOGITS", "/l"}, {"FINETUNE_CUDA_MEMORY_HISTORY", "/m"},
                      {"FINETUNE_LONG_ROW_ATTENTION", "cudnn"}, {"FINETUNE_BUILD_TARGET", "finetune"}};
  EXPECT_EQ(parse_train({}, env).options.log_level, "warn");  // FINETUNE_LOG_LEVEL is an option
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
      {{"--optim", "sgd_nesterov"}, "--optim: unknown value \"sgd_nesterov\"; supported: adamw_torch, adamw_8bit, sgd, adafactor"},
      {{"--optim", "rmsprop"}, "--optim: \"rmsprop\" is not supported (not implemented; finetune offers"},
      {{"--lr_scheduler_type", "reduce_lr_on_plateau"},
       "--lr_scheduler_type: \"reduce_lr_on_plateau\" is not supported (it steps on evaluation metrics"},
      {{"--lr_scheduler_type", "cosine_annealing"}, "--lr_scheduler_type: unknown value"},
      {{"--eval_strategy", "sometimes"}, "--eval_strategy: unknown value \"sometimes\"; supported: no, steps, epoch"},
      {{"--save_strategy", "best"}, "--save_strategy: \"best\" is not supported"},
      {{"--metric_for_best_model", "accuracy"}, "--metric_for_best_model: unknown value \"accuracy\"; supported: eval_loss"},
      {{"--early_stopping_patience", "-1"}, "--early_stopping_patience: expected an integer >= 0"},
      {{"--early_stopping_threshold", "-0.1"}, "--early_stopping_threshold"},
      {{"--bf16", "maybe"}, "--bf16: expected true, false, 1 or 0"},
      {{"--chat_template", "vicuna"}, "--chat_template"},
      {{"--save_method", "gguf_q4_k_m"}, "--save_method: \"gguf_q4_k_m\" is not supported"},
      {{"--bias", "some"}, "--bias: unknown value \"some\"; supported: none, all, lora_only"},
      {{"--ddp_backend", "mpi"}, "--ddp_backend"},
      {{"--report_to", "wandb"}, "--report_to"},
      {{"--load_in_4bit", "maybe"}, "--load_in_4bit: expected true, false, 1 or 0, got \"maybe\""},
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

TEST(OptionsTest, LoadIn4bitIsAStoreTrueFlag) {
  EXPECT_FALSE(parse_train({}).options.load_in_4bit);
  EXPECT_TRUE(parse_train({"--load_in_4bit"}).options.load_in_4bit);
  EXPECT_TRUE(parse_train({"--load_in_4bit", "true"}).options.load_in_4bit);
  EXPECT_FALSE(parse_train({"--load_in_4bit", "false"}).options.load_in_4bit);
  EXPECT_EQ(parse_train({"--save_method", "merged_4bit_forced"}).options.save_method, "merged_4bit");
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

namespace finetune {
namespace {

// A value too long for a path (ENAMETOOLONG) is not a file: the option's own usage error, never a
// std::filesystem_error (found by the option_file fuzz target).
TEST(Options, ChatTemplateTooLongForAPathIsAUsageError) {
  const std::string value(5000, 'z');
  const std::string msg = usage_error_of([&] { parse_train({"--chat_template", value}); });
  EXPECT_NE(msg.find("--chat_template"), std::string::npos) << msg.substr(0, 200);
}

}  // namespace
}  // namespace finetune
