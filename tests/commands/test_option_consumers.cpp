// One source of truth per choice: every value the option parser accepts is accepted by the code
// that consumes it, and every value a consumer accepts is accepted by the parser (with the same
// meaning). A list that drifts on either side fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "../model/tiny_config.h"
#include "../config/option_test_helpers.h"
#include "finetune/checkpoint/save_methods.h"
#include "finetune/commands/stage_configs.h"
#include "finetune/data/chat_template.h"
#include "finetune/data/preference_rows.h"
#include "finetune/data/step_planner.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/device_selection.h"
#include "finetune/model/dtype_names.h"
#include "finetune/model/offload_activations_names.h"
#include "finetune/model/projection_names.h"
#include "finetune/train/loss.h"
#include "finetune/train/lr_schedule.h"
#include "finetune/train/micro_step_graph_limits.h"
#include "finetune/train/micro_step_graphs.h"
#include "finetune/train/optimizer.h"
#include "finetune/train/preference_loss.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

using testing::parse_train;

const OptionSpec& spec_of(const std::string& name) {
  for (const auto& spec : option_table()) {
    if (spec.name == name) return spec;
  }
  throw std::runtime_error("no option " + name);
}

TEST(OptionConsumers, DtypeSpellingsMeanTheSameToParserAndModel) {
  EXPECT_EQ(spec_of("dtype").choices, dtype_names());
  for (const auto& name : dtype_names()) {
    const auto parsed = parse_train({"--dtype", name}).options.dtype;
    EXPECT_EQ(parsed, name);
    EXPECT_NO_THROW(select_dtype(parsed, at::kCPU)) << name;
  }
  for (const auto& [alias, name] : dtype_aliases()) {
    const auto parsed = parse_train({"--dtype", alias}).options.dtype;
    EXPECT_EQ(parsed, name);
    EXPECT_EQ(select_dtype(alias, at::kCPU), select_dtype(name, at::kCPU)) << alias;
  }
  EXPECT_EQ(select_dtype("bfloat16", at::kCPU), at::kBFloat16);
  EXPECT_EQ(select_dtype("float16", at::kCPU), at::kHalf);
  EXPECT_EQ(select_dtype("float32", at::kCPU), at::kFloat);
  EXPECT_EQ(select_dtype("auto", at::kCPU), at::kFloat);
  EXPECT_THROW(select_dtype("float8", at::kCPU), UsageError);
  EXPECT_THROW(parse_train({"--dtype", "float8"}), UsageError);
}

TEST(OptionConsumers, OffloadActivationsNamesMeanTheSameToParserAndTrainer) {
  EXPECT_EQ(spec_of("offload_activations").choices, offload_activations_names());
  EXPECT_EQ(trainer_config_from(parse_train({}).options, 10).offload_activations, OffloadActivations::kAuto);
  const std::map<std::string, OffloadActivations> modes{
      {"true", OffloadActivations::kOn}, {"false", OffloadActivations::kOff}, {"auto", OffloadActivations::kAuto}};
  for (const auto& name : offload_activations_names()) {
    const auto options = parse_train({"--offload_activations", name}).options;
    EXPECT_EQ(trainer_config_from(options, 10).offload_activations, modes.at(name)) << name;
  }
  EXPECT_THROW(parse_train({"--offload_activations", "sometimes"}), UsageError);
}

TEST(OptionConsumers, LmHeadLossNamesMeanTheSameToParserAndLoss) {
  EXPECT_EQ(spec_of("lm_head_loss").choices, lm_head_loss_names());
  EXPECT_EQ(parse_train({}).options.lm_head_loss, "vocab_tiles");
  EXPECT_EQ(lm_head_loss_from_name(parse_train({}).options.lm_head_loss), kDefaultLmHeadLoss);
  for (const auto& name : lm_head_loss_names()) {
    const auto parsed = parse_train({"--lm_head_loss", name}).options.lm_head_loss;
    EXPECT_EQ(lm_head_loss_name(lm_head_loss_from_name(parsed)), name);
  }
  EXPECT_THROW(parse_train({"--lm_head_loss", "columns"}), UsageError);
  // Only the SFT objective takes it (commands/preference_setup.cpp): dpo and orpo refuse it.
  EXPECT_TRUE(spec_of("lm_head_loss").read_by(Action::Train));
  EXPECT_FALSE(spec_of("lm_head_loss").read_by(Action::Dpo));
  EXPECT_FALSE(spec_of("lm_head_loss").read_by(Action::Orpo));
}

TEST(OptionConsumers, StepPlanningNamesMeanTheSameToParserAndStream) {
  EXPECT_EQ(spec_of("step_planning").choices, step_planning_names());
  EXPECT_EQ(parse_train({}).options.step_planning, "balanced");
  for (const auto& name : step_planning_names()) {
    const auto parsed = parse_train({"--step_planning", name}).options.step_planning;
    EXPECT_EQ(parsed, name);
    EXPECT_EQ(step_planning_name(step_planning_from_name(parsed)), name);
  }
  EXPECT_THROW(parse_train({"--step_planning", "greedy"}), UsageError);
  EXPECT_THROW(step_planning_from_name("greedy"), Error);
}

TEST(OptionConsumers, ChatTemplateNamesMeanTheSameToParserAndData) {
  EXPECT_EQ(spec_of("chat_template").choices, chat_template_names());
  SpecialTokens special;
  special.bos_token = "<s>";
  special.eos_token = "</s>";
  const ChatTemplates tokenizer_templates = {{"default", "{{ messages[0].content }}"}};
  for (const auto& name : chat_template_names()) {
    const auto parsed = parse_train({"--chat_template", name}).options.chat_template;  // qwen2.5 included
    EXPECT_EQ(parsed, name);
    if (is_alpaca_choice(parsed)) {
      EXPECT_THROW(ChatTemplate::select(parsed, tokenizer_templates, special, {}), UsageError);
    } else {
      EXPECT_NO_THROW(ChatTemplate::select(parsed, tokenizer_templates, special, {})) << name;
    }
  }
  for (const auto& [alias, name] : chat_template_aliases()) {
    EXPECT_EQ(parse_train({"--chat_template", alias}).options.chat_template, name);
    EXPECT_EQ(ChatTemplate::select(alias, {}, special, {}).description(),
              ChatTemplate::select(name, {}, special, {}).description());
  }
  EXPECT_THROW(parse_train({"--chat_template", "vicuna"}), UsageError);
  EXPECT_THROW(ChatTemplate::select("vicuna", {}, special, {}), UsageError);
}

TEST(OptionConsumers, TargetModulesAreTheModelsProjections) {
  EXPECT_EQ(spec_of("target_modules").choices, projection_names());
  EXPECT_EQ(Options{}.target_modules, projection_names());
  EXPECT_EQ(parse_train({"--target_modules", "all-linear"}).options.target_modules, projection_names());
  CausalLM model(tiny_llama_config({16, 8, 12, 1, 2, 1, 4}), at::kFloat, at::kCPU);
  std::set<std::string> leaves;
  for (const auto& [name, linear] : model.named_linears()) leaves.insert(name.substr(name.rfind('.') + 1));
  // Every family's names are accepted; a Llama has Llama's (Phi-3's fused ones are its own).
  const auto llama_names = lora_target_names(*find_architecture_by_class("LlamaForCausalLM"));
  EXPECT_EQ(leaves, std::set<std::string>(llama_names.begin(), llama_names.end()));
  for (const auto& name : llama_names) {
    CausalLM fresh(tiny_llama_config({16, 8, 12, 1, 2, 1, 4}), at::kFloat, at::kCPU);
    LoraConfig lora;
    lora.r = 2;
    lora.target_modules = parse_train({"--target_modules", name}).options.target_modules;
    EXPECT_EQ(attach_lora(fresh, lora, 1).size(), 2u) << name;
  }
  EXPECT_THROW(parse_train({"--target_modules", "lm_head"}), UsageError);
}

TEST(OptionConsumers, SchedulesAreTheOnesTheScheduleComputes) {
  EXPECT_EQ(spec_of("lr_scheduler_type").choices, lr_scheduler_types());
  for (const auto& type : lr_scheduler_types()) {
    // The two types whose functions have a required keyword get it (lr_schedule.h).
    const auto kwargs = type == "warmup_stable_decay"                                   ? R"({"num_decay_steps": 3})"
                        : type == "cosine_with_min_lr" || type == "cosine_warmup_with_min_lr" ? R"({"min_lr_rate": 0.1})"
                                                                                         : "";
    std::vector<std::string> args = {"--lr_scheduler_type", type};
    if (*kwargs) args.insert(args.end(), {"--lr_scheduler_kwargs", kwargs});
    const auto options = parse_train(args).options;
    const LrSchedule schedule = lr_schedule_from(options.lr_scheduler_type, 2, 10, 1e-3,
                                                 parse_lr_scheduler_kwargs(options.lr_scheduler_kwargs));
    EXPECT_NO_THROW(lr_multiplier(schedule, 3)) << type;
  }
  LrSchedule unknown;
  unknown.type = "reduce_lr_on_plateau";
  EXPECT_THROW(lr_multiplier(unknown, 0), UsageError);
  EXPECT_THROW(parse_train({"--lr_scheduler_type", "reduce_lr_on_plateau"}), UsageError);
}

TEST(OptionConsumers, OptimizersAreTheOnesTheTrainerBuilds) {
  EXPECT_EQ(spec_of("optim").choices, optimizer_names());
  const auto parameter = at::zeros({4, 3}).set_requires_grad(true);
  for (const auto& name : optimizer_names()) {
    const auto parsed = parse_train({"--optim", name}).options.optim;
    EXPECT_EQ(parsed, name);
    const auto optimizer = make_optimizer(parsed, {parameter}, AdamWOptions{}, /*fused=*/false);
    EXPECT_EQ(optimizer->state().optimizer, name);
    // Every optimizer keeps state but plain SGD (torch's SGD without momentum keeps none).
    EXPECT_EQ(optimizer_state_layout(name, parameter).empty(), name == kSgdName) << name;
  }
  for (const auto& [alias, name] : optimizer_aliases()) {
    EXPECT_EQ(parse_train({"--optim", alias}).options.optim, name) << alias;
  }
  EXPECT_THROW(make_optimizer("rmsprop", {parameter}, AdamWOptions{}, false), Error);
  EXPECT_THROW(parse_train({"--optim", "rmsprop"}), UsageError);
}

TEST(OptionConsumers, SaveMethodsAreTheOnesTheExportWrites) {
  EXPECT_EQ(spec_of("save_method").choices, supported_save_methods());
  for (const auto& method : supported_save_methods()) {
    EXPECT_EQ(parse_train({"--save_method", method}).options.save_method, method);
  }
  for (const auto& [alias, method] : save_method_aliases()) {
    EXPECT_EQ(parse_train({"--save_method", alias}).options.save_method, method);
  }
  for (const auto& entry : save_method_table()) {
    EXPECT_EQ(save_method_from_name(entry.name), entry.method);
    EXPECT_STREQ(save_method_name(entry.method), entry.name);
  }
  EXPECT_THROW(save_method_from_name("merged_4bit_forced"), std::invalid_argument);  // the parser resolves aliases
  EXPECT_THROW(parse_train({"--save_method", "gguf_q8_0"}), UsageError);
}

TEST(OptionConsumers, ReportToValuesAreTheTargetsTheTrainerConfigReads) {
  std::vector<std::string> names;
  for (const auto& target : report_targets()) names.push_back(target.name);
  EXPECT_EQ(spec_of("report_to").choices, names);
  for (const auto& target : report_targets()) {
    const Options options = parse_train({"--report_to", target.name}).options;
    EXPECT_EQ(trainer_config_from(options, 1).tensorboard, target.tensorboard) << target.name;
  }
  EXPECT_THROW(report_target("wandb"), Error);
}

TEST(OptionConsumers, CudaGraphsHelpStatesTheGraphsLimits) {
  EXPECT_EQ(MicroStepGraphsConfig{}.max_tokens, kCudaGraphMaxTokens);
  EXPECT_EQ(MicroStepGraphsConfig{}.max_graphs, kCudaGraphMaxShapes);
  const std::string& help = spec_of("cuda_graphs").help;
  EXPECT_NE(help.find("up to " + std::to_string(kCudaGraphMaxTokens) + " tokens"), std::string::npos) << help;
  EXPECT_NE(help.find("at most " + std::to_string(kCudaGraphMaxShapes) + " lengths"), std::string::npos) << help;
  EXPECT_NE(help.find("the next " + std::to_string(kCudaGraphCaptureAheadSteps) + " steps"), std::string::npos) << help;
}

TEST(OptionConsumers, LoraShapeOptionsAreTrainOptions) {
  for (const auto& option : lora_shape_options()) EXPECT_TRUE(spec_of(option.name).read_by(Action::Train)) << option.name;
  // Each one's value reads the field its option sets.
  const auto lora = adapter_setup_from(parse_train({"--r", "4", "--lora_alpha", "8.5", "--use_rslora", "--target_modules",
                                                    "q_proj,v_proj", "--bias", "lora_only", "--modules_to_save",
                                                    "embed_tokens", "--target_parameters",
                                                    "mlp.experts.gate_up_proj,mlp.experts.down_proj"}).options).lora;
  std::map<std::string, std::string> values;
  for (const auto& option : lora_shape_options()) values[option.name] = option.value(lora);
  EXPECT_EQ(values, (std::map<std::string, std::string>{{"r", "4"}, {"lora_alpha", "8.5"}, {"use_rslora", "true"},
                                                        {"use_dora", "false"}, {"target_modules", "q_proj,v_proj"},
                                                        {"target_parameters", "mlp.experts.gate_up_proj,mlp.experts.down_proj"},
                                                        {"bias", "lora_only"}, {"modules_to_save", "embed_tokens"}}));
}

TEST(OptionConsumers, LoraOperandCacheReachesTheAdapterSetup) {
  EXPECT_FALSE(adapter_setup_from(parse_train({}).options).lora_operand_cache);
  EXPECT_TRUE(adapter_setup_from(parse_train({"--lora_operand_cache", "true"}).options).lora_operand_cache);
  EXPECT_FALSE(adapter_setup_from(parse_train({"--lora_operand_cache", "false"}).options).lora_operand_cache);
}

TEST(OptionConsumers, PreferenceChoicesAreTheOnesTheObjectiveAndRowsRead) {
  std::set<std::string> objective_types;
  for (const auto& [name, type] : dpo_loss_types()) objective_types.insert(name);
  const auto& loss_types = spec_of("loss_type").choices;
  EXPECT_EQ(std::set<std::string>(loss_types.begin(), loss_types.end()), objective_types);
  for (const auto& name : loss_types) EXPECT_NO_THROW(dpo_loss_type_from_name(name)) << name;
  for (const auto& name : spec_of("truncation_mode").choices) EXPECT_NO_THROW(truncation_mode_from_name(name)) << name;
  EXPECT_EQ(spec_of("truncation_mode").choices.size(), 2u);
  EXPECT_EQ(spec_of("truncation_mode").default_value, "keep_start");  // DPOConfig's
  EXPECT_EQ(spec_of("loss_type").default_value, "sigmoid");
  EXPECT_EQ(spec_of("beta").default_value, "0.1");
}

TEST(OptionConsumers, LogLevelsAreTheLoggersLevels) {
  EXPECT_EQ(spec_of("log_level").choices, log::level_names());
  for (const auto& name : log::level_names()) {
    EXPECT_NO_THROW(log::level_from_name(parse_train({"--log_level", name}).options.log_level)) << name;
  }
  EXPECT_EQ(log::level_from_name("warn"), log::Level::Warn);
  EXPECT_EQ(parse_train({}, {{"FINETUNE_LOG_LEVEL", "debug"}}).options.log_level, "debug");
  EXPECT_THROW(parse_train({"--log_level", "verbose"}), UsageError);
}

}  // namespace
}  // namespace finetune
