// The per-stage configs cut from the option set: every field each stage reads comes from the
// option of the same meaning, and the step count is derived as HF Trainer derives it.
#include <gtest/gtest.h>

#include "../config/option_test_helpers.h"
#include "../test_support.h"
#include "finetune/commands/stage_configs.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using testing::parse_train;
using testing::parse_args;

Options non_default_options() {
  return parse_train({"--dtype", "bf16", "--device", "cpu", "--r", "8", "--lora_alpha", "32", "--lora_dropout",
                           "0.1", "--use_rslora", "--use_dora", "--target_modules", "q_proj,v_proj", "--random_state", "9",
                           "--init_adapter", "adapters/a", "--seed", "11", "--eval_dataset", "e.jsonl", "--eval_split",
                           "0.25", "--chat_template", "qwen2.5", "--max_seq_length", "512", "--train_on_completions",
                           "false", "--skip_bad_rows", "--ddp_backend", "gloo", "--ddp_timeout", "7.5",
                           "--per_device_train_batch_size", "3", "--gradient_accumulation_steps", "5",
                           "--group_by_length", "--packing", "--shuffle", "false", "--dataloader_drop_last",
                           "--logging_steps", "4", "--save_steps", "6", "--eval_steps", "8", "--learning_rate", "3e-5",
                           "--lr_scheduler_type", "cosine", "--warmup_ratio", "0.1", "--warmup_steps", "0",
                           "--optim", "paged_adamw_8bit", "--adam_beta1", "0.8", "--adam_beta2", "0.95",
                           "--adam_epsilon", "1e-6", "--weight_decay",
                           "0.05", "--max_grad_norm", "0.5", "--use_gradient_checkpointing", "false", "--output_dir",
                           "out", "--ddp_check_consistency_steps", "10", "--ddp_bucket_cap_mb", "4",
                           "--ddp_find_unused_parameters", "--profile_start_step", "2", "--profile_steps", "5",
                           "--save_model", "--save_method", "lora", "--save_path", "merged",
                           "--dataset_split", "validation", "--step_planning", "literal"})
      .options;
}

TEST(StageConfigs, ModelSourceAndCommunicator) {
  const auto options = non_default_options();
  const auto source = model_source_from(options);
  EXPECT_EQ(source.model_name, "m");
  EXPECT_EQ(source.dtype, "bfloat16");
  EXPECT_EQ(source.device, "cpu");
  const auto communicator = communicator_options_from(options);
  EXPECT_EQ(communicator.backend, "gloo");
  EXPECT_DOUBLE_EQ(communicator.timeout_seconds, 7.5);
}

TEST(StageConfigs, AdapterSetup) {
  const auto setup = adapter_setup_from(non_default_options());
  EXPECT_EQ(setup.lora.r, 8);
  EXPECT_DOUBLE_EQ(setup.lora.lora_alpha, 32);
  EXPECT_DOUBLE_EQ(setup.lora.lora_dropout, 0.1);
  EXPECT_TRUE(setup.lora.use_rslora);
  EXPECT_TRUE(setup.lora.use_dora);
  EXPECT_EQ(setup.lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(setup.lora.bias, "none");
  EXPECT_EQ(setup.init_adapter, "adapters/a");
  EXPECT_EQ(setup.random_state, 9u);
  // What --init_adapter's config must then agree with (bias is left at its default here).
  EXPECT_EQ(setup.given_lora_options,
            (std::vector<std::string>{"r", "lora_alpha", "use_rslora", "use_dora", "target_modules"}));
}

TEST(StageConfigs, AdapterSetupTakesTheAdapterUnderEitherName) {
  const auto eval = [](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"eval", "--model_name", "m", "--dataset", "d"};
    args.insert(args.end(), extra.begin(), extra.end());
    return adapter_setup_from(parse_args(args).options);
  };
  auto setup = eval({"--adapter", "a"});
  EXPECT_EQ(setup.init_adapter, "a");
  EXPECT_EQ(setup.adapter_option, "--adapter");
  setup = eval({"--init_adapter", "b"});
  EXPECT_EQ(setup.init_adapter, "b");
  EXPECT_EQ(setup.adapter_option, "--init_adapter");
  EXPECT_TRUE(eval({}).init_adapter.empty());
  setup = adapter_setup_from(parse_args({"export", "--model_name", "m", "--adapter", "c"}).options);
  EXPECT_EQ(setup.init_adapter, "c");
  EXPECT_EQ(setup.adapter_option, "--adapter");
  EXPECT_EQ(adapter_setup_from(parse_train({"--init_adapter", "d"}).options).adapter_option, "--init_adapter");
}

TEST(StageConfigs, ModelStageSetupPerCommand) {
  const auto train = model_stage_setup_from(parse_train({"--init_adapter", "a"}).options, Action::Train);
  EXPECT_TRUE(train.fresh_adapter);
  EXPECT_FALSE(train.needs_tokenizer);
  EXPECT_EQ(train.adapter.init_adapter, "a");
  EXPECT_EQ(train.command, "train");
  const auto chat = model_stage_setup_from(parse_args({"chat", "--model_name", "m", "--adapter", "b"}).options, Action::Chat);
  EXPECT_FALSE(chat.fresh_adapter);
  EXPECT_TRUE(chat.needs_tokenizer);
  EXPECT_EQ(chat.adapter.init_adapter, "b");
  EXPECT_EQ(chat.source.model_name, "m");
  const auto exported = model_stage_setup_from(parse_args({"export", "--model_name", "m"}).options, Action::Export);
  EXPECT_FALSE(exported.fresh_adapter || exported.needs_tokenizer);
  EXPECT_TRUE(exported.adapter.init_adapter.empty());
}

TEST(StageConfigs, DataSetup) {
  const auto setup = data_setup_from(non_default_options());
  EXPECT_EQ(setup.datasets, std::vector<std::string>{"d.jsonl"});
  EXPECT_EQ(setup.dataset_weights, std::vector<double>{1.0});
  EXPECT_EQ(setup.dataset_split, "validation");
  EXPECT_EQ(setup.eval_dataset, "e.jsonl");
  EXPECT_DOUBLE_EQ(setup.eval_split, 0.25);
  EXPECT_EQ(setup.seed, 11u);
  EXPECT_EQ(setup.chat_template, "qwen2.5");
  EXPECT_EQ(setup.max_seq_length, 512);
  EXPECT_FALSE(setup.train_on_completions);
  EXPECT_TRUE(setup.skip_bad_rows);
}

TEST(StageConfigs, DataSetupListsWeightsKwargsAndRawText) {
  Options options;
  options.dataset = "a.jsonl, org/b ,c.parquet";
  options.dataset_weights = "2,0.5,1";
  options.chat_template_kwargs = R"({"enable_thinking": false, "b": 1})";
  auto setup = data_setup_from(options);
  EXPECT_EQ(setup.datasets, (std::vector<std::string>{"a.jsonl", "org/b", "c.parquet"}));
  EXPECT_EQ(setup.dataset_weights, (std::vector<double>{2, 0.5, 1}));
  EXPECT_EQ(setup.chat_template_kwargs.dump(), R"({"enable_thinking":false,"b":1})");  // order kept
  options.dataset_weights = "2,1";
  testing::expect_contains(testing::error_message([&] { data_setup_from(options); }), {"--dataset_weights has 2 weights", "3 datasets"});
  options.dataset_weights = "2,x,1";
  testing::expect_contains(testing::error_message([&] { data_setup_from(options); }), {"--dataset_weights: \"x\" is not a non-negative number"});
  options.dataset_weights = "";
  options.chat_template_kwargs = "[1]";
  testing::expect_contains(testing::error_message([&] { data_setup_from(options); }), {"--chat_template_kwargs must be a JSON object"});
  options.chat_template_kwargs = "{oops";
  testing::expect_contains(testing::error_message([&] { data_setup_from(options); }), {"--chat_template_kwargs: invalid JSON"});
  options.chat_template_kwargs = "";
  options.raw_text_file = "book.txt";
  testing::expect_contains(testing::error_message([&] { data_setup_from(options); }), {"--raw_text_file and --dataset are alternatives"});
  options.dataset = "";
  options.chunk_size = 100;
  options.stride = 10;
  setup = data_setup_from(options);
  EXPECT_EQ(setup.raw_text_file, "book.txt");
  EXPECT_EQ(setup.raw_text.chunk_size, 100);
  EXPECT_EQ(setup.raw_text.stride, 10);
}

TEST(StageConfigs, StreamConfigTakesTheRankFromTheLaunch) {
  LaunchEnv launch;
  launch.rank = 2;
  launch.world_size = 4;
  const auto config = stream_config_from(non_default_options(), launch, /*pad_token_id=*/17, /*padding_free=*/true);
  EXPECT_EQ(config.sampler.rank, 2);
  EXPECT_EQ(config.sampler.world_size, 4);
  EXPECT_EQ(config.sampler.seed, 11u);
  EXPECT_FALSE(config.sampler.shuffle);
  EXPECT_TRUE(config.sampler.drop_last);
  EXPECT_EQ(config.batch_size, 3);
  EXPECT_EQ(config.gradient_accumulation_steps, 5);
  EXPECT_TRUE(config.group_by_length);
  EXPECT_TRUE(config.packing);
  EXPECT_EQ(config.max_seq_length, 512);
  EXPECT_EQ(config.pad_token_id, 17);
  EXPECT_EQ(config.planning, StepPlanning::literal);
  EXPECT_TRUE(config.padding_free);
  EXPECT_EQ(stream_config_from(parse_train({}).options, launch, 0, false).planning, StepPlanning::balanced);
}

TEST(StageConfigs, TrainerConfig) {
  const auto config = trainer_config_from(non_default_options(), 40);
  EXPECT_EQ(config.total_steps, 40);
  EXPECT_EQ(config.logging_steps, 4);
  EXPECT_EQ(config.save_steps, 6);
  EXPECT_EQ(config.eval_steps, 8);
  EXPECT_DOUBLE_EQ(config.learning_rate, 3e-5);
  EXPECT_EQ(config.schedule.type, "cosine");
  EXPECT_EQ(config.schedule.total_steps, 40);
  EXPECT_EQ(config.schedule.warmup_steps, 4);  // ceil(40 * 0.1), warmup_steps 0
  EXPECT_EQ(config.optim, "adamw_8bit");
  EXPECT_DOUBLE_EQ(config.adamw.beta1, 0.8);
  EXPECT_DOUBLE_EQ(config.adamw.beta2, 0.95);
  EXPECT_DOUBLE_EQ(config.adamw.eps, 1e-6);
  EXPECT_DOUBLE_EQ(config.adamw.weight_decay, 0.05);
  EXPECT_DOUBLE_EQ(config.max_grad_norm, 0.5);
  EXPECT_FALSE(config.gradient_checkpointing);
  EXPECT_EQ(config.output_dir, "out");
  EXPECT_EQ(config.ddp_check_consistency_steps, 10);
  EXPECT_EQ(config.ddp_bucket_cap_mb, 4);
  EXPECT_TRUE(config.ddp_find_unused_parameters);
  EXPECT_EQ(config.profile_start_step, 2);
  EXPECT_EQ(config.profile_steps, 5);
  EXPECT_FALSE(config.tensorboard);  // --report_to none
}

// NEFTune's scale reads each micro-batch's longest sample: its steps are planned literally (HF's micro-batches).
TEST(StageConfigs, NeftuneReachesTheTrainerAndPlansStepsLiterally) {
  const auto options = parse_train({"--neftune_noise_alpha", "5"}).options;
  EXPECT_DOUBLE_EQ(trainer_config_from(options, 10).neftune_noise_alpha, 5.0);
  EXPECT_DOUBLE_EQ(trainer_config_from(parse_train({}).options, 10).neftune_noise_alpha, 0.0);
  EXPECT_EQ(stream_config_from(options, LaunchEnv{}, 0, false).planning, StepPlanning::literal);
}

TEST(StageConfigs, TrainerConfigTensorBoardFromReportTo) {
  // metrics.jsonl is written whatever --report_to says; tensorboard and all add the event files.
  for (const auto& [report_to, tensorboard] :
       std::vector<std::pair<std::string, bool>>{{"none", false}, {"jsonl", false}, {"tensorboard", true}, {"all", true}}) {
    SCOPED_TRACE(report_to);
    EXPECT_EQ(trainer_config_from(parse_train({"--report_to", report_to}).options, 10).tensorboard, tensorboard);
  }
}

TEST(StageConfigs, ExportSetup) {
  const auto setup = export_setup_from(non_default_options());
  EXPECT_TRUE(setup.save_model);
  EXPECT_EQ(setup.export_config.save_method, SaveMethod::Lora);
  EXPECT_EQ(setup.export_config.save_path, "merged");
  EXPECT_EQ(export_setup_from(parse_train({"--save_model"}).options).export_config.save_method, SaveMethod::Merged16bit);
  EXPECT_EQ(setup.export_config.base_model_name, "m");
}

TEST(StageConfigs, ExportSetupGguf) {
  const auto gguf = export_setup_from(
      parse_train({"--save_model", "--save_method", "gguf", "--quantization", "f16,fast_quantized,bf16"}).options);
  EXPECT_EQ(gguf.export_config.quantization, (std::vector<std::string>{"f16", "q8_0", "bf16"}));
  EXPECT_FALSE(gguf.export_config.save_gguf);  // the method itself writes them, once
  const auto also = export_setup_from(parse_train({"--save_model", "--save_gguf"}).options);
  EXPECT_TRUE(also.export_config.save_gguf);
  EXPECT_EQ(also.export_config.quantization, (std::vector<std::string>{"q8_0"}));
}

TEST(StageConfigs, GenerationConfig) {
  const auto config = generation_config_from(
      parse_args({"generate", "--model_name", "m", "--prompt", "p", "--max_new_tokens", "7", "--temperature", "0.7",
                  "--top_p", "0.9", "--top_k", "40", "--repetition_penalty", "1.3", "--generation_batch_size", "3",
                  "--seed", "5", "--stop", "[\"###\", \"\\n\\n\"]"}).options);
  EXPECT_EQ(config.max_new_tokens, 7);
  EXPECT_DOUBLE_EQ(config.temperature, 0.7);
  EXPECT_TRUE(config.sampling());
  EXPECT_DOUBLE_EQ(config.top_p, 0.9);
  EXPECT_EQ(config.top_k, 40);
  EXPECT_DOUBLE_EQ(config.repetition_penalty, 1.3);
  EXPECT_EQ(config.batch_size, 3);
  EXPECT_EQ(config.seed, 5u);
  EXPECT_EQ(config.stop_strings, (std::vector<std::string>{"###", "\n\n"}));
  // A plain value is one stop string; none by default; greedy by default.
  const auto plain = generation_config_from(parse_args({"generate", "--model_name", "m", "--prompt", "p", "--stop",
                                                        "User:"}).options);
  EXPECT_EQ(plain.stop_strings, std::vector<std::string>{"User:"});
  EXPECT_FALSE(plain.sampling());
  EXPECT_TRUE(generation_config_from(parse_args({"generate", "--model_name", "m", "--prompt", "p"}).options)
                  .stop_strings.empty());
  for (const char* bad : {"[1]", "[\"\"]", "[\"a\""}) {
    EXPECT_THROW(generation_config_from(parse_args({"generate", "--model_name", "m", "--prompt", "p", "--stop", bad})
                                            .options),
                 UsageError)
        << bad;
  }
}

TEST(StageConfigs, TotalStepsFromMaxStepsOrEpochs) {
  EXPECT_EQ(total_steps_from(parse_train({"--max_steps", "7"}).options, 100), 7);
  EXPECT_EQ(total_steps_from(parse_train({"--max_steps", "0", "--num_train_epochs", "2.5"}).options, 10), 25);
  EXPECT_EQ(total_steps_from(parse_train({"--max_steps=-1", "--num_train_epochs", "0.01"}).options, 10), 1);
  // --num_train_epochs given without --max_steps: the epochs decide (the 400-step default is Unsloth's).
  EXPECT_EQ(total_steps_from(parse_train({"--num_train_epochs", "3"}).options, 10), 30);
  EXPECT_EQ(total_steps_from(parse_train({"--num_train_epochs", "0.1"}).options, 100), 10);
  EXPECT_EQ(total_steps_from(parse_train({}, {{"FINETUNE_NUM_TRAIN_EPOCHS", "2"}}).options, 10), 20);
  EXPECT_TRUE(steps_from_epochs(parse_train({"--num_train_epochs", "3"}).options));
  // Both given: a positive --max_steps wins, as in HF TrainingArguments.
  EXPECT_EQ(total_steps_from(parse_train({"--num_train_epochs", "3", "--max_steps", "4"}).options, 10), 4);
  EXPECT_FALSE(steps_from_epochs(parse_train({"--num_train_epochs", "3", "--max_steps", "4"}).options));
  // Neither: the default --max_steps.
  EXPECT_EQ(total_steps_from(parse_train({}).options, 10), Options{}.max_steps);
  // An absurd epoch count is refused instead of overflowing into a negative step count.
  EXPECT_THROW(total_steps_from(parse_train({"--max_steps", "0", "--num_train_epochs", "1e300"}).options, 10),
               UsageError);
}

}  // namespace
}  // namespace finetune
