// Command-line / config-file / environment options.
//
// One option table (option_table.cpp) is the single source of every option's name, aliases,
// group, type, default, range and help text. Values are layered with precedence
//     --config FILE.json  <  environment FINETUNE_<KEY>  <  command line
// and then converted and validated into the typed `Options` struct. Each row names the commands
// that read it: on the command line another command's option is a UsageError naming both; in the
// config file or the environment (shared between commands) it is ignored and noted. Names follow Unsloth's CLI and
// Hugging Face TrainingArguments, so users can carry their flags over (README: "Coming from
// Unsloth's CLI"). A FINETUNE_* environment variable that is neither an option nor one of the few
// the project's scripts export (option_environment.h) is an error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "finetune/ddp/ddp_defaults.h"
#include "finetune/launch/environment.h"
#include "finetune/model/projection_names.h"

namespace finetune {

struct Options {
  // --- model
  std::string model_name;            // local dir, or hub id (downloaded into the HF cache: hub/hub_fetch.h)
  std::string revision = "main";     // the model's hub branch, tag or commit
  int64_t max_seq_length = 2048;
  std::string dtype = "auto";        // model/dtype_names.h (auto: bf16 on CUDA, fp32 on CPU; None = auto)
  bool load_in_4bit = false;         // NF4 base projections (QLoRA)
  std::string device = "auto";       // auto|cpu|cuda

  // --- LoRA
  int64_t r = 16;
  double lora_alpha = 16;
  double lora_dropout = 0.0;
  std::string bias = "none";
  bool use_gradient_checkpointing = true;  // "unsloth" is accepted as true
  bool cuda_graphs = true;
  std::string offload_activations = "auto";  // true|false|auto (model/offload_activations_names.h)
  std::string lm_head_loss = "vocab_tiles";  // train/loss.h: kDefaultLmHeadLoss, lm_head_loss_names()
  bool lora_operand_cache = false;            // lora/attach_lora.h: set_lora_operand_cache
  int64_t random_state = 3407;
  bool use_rslora = false;
  bool use_dora = false;             // DoRA adapters (PEFT's use_dora)
  std::vector<std::string> target_modules = projection_names();
  // PEFT's target_parameters: a MoE model's expert stacks (mlp.experts.gate_up_proj, mlp.experts.down_proj).
  std::vector<std::string> target_parameters;
  std::vector<std::string> modules_to_save;  // PEFT's modules_to_save: embed_tokens (lora/attach_lora.h)
  std::string init_adapter;          // existing PEFT adapter dir to start from

  // --- training
  int64_t per_device_train_batch_size = 2;
  int64_t per_device_eval_batch_size = 4;
  int64_t gradient_accumulation_steps = 4;
  int64_t warmup_steps = 5;
  double warmup_ratio = 0.0;
  int64_t max_steps = 400;           // <= 0: use num_train_epochs
  double num_train_epochs = 1.0;
  double learning_rate = 2e-4;
  std::string optim = "adamw_torch";
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;        // <= 0 disables clipping
  std::string lr_scheduler_type = "linear";  // train/lr_scheduler_names.h: lr_scheduler_types()
  std::string lr_scheduler_kwargs;   // JSON object: get_scheduler's scheduler_specific_kwargs; empty: none
  int64_t seed = 3407;
  std::string step_planning = "balanced";  // data/step_planner.h: step_planning_names()
  double neftune_noise_alpha = 0;    // TRL's NEFTune (model/embedding_noise.h); 0 (or None): off
  bool bf16 = false;                 // HF's precision flags: aliases of --dtype bfloat16 / float16
  bool fp16 = false;
  std::string run_name;              // the run's name in the summary and report.html; empty: output_dir's
  // HF's evaluation / checkpoint timing and best model (train/checkpoint_policy.h)
  std::string eval_strategy = "steps";  // no|steps|epoch
  std::string save_strategy = "steps";  // no|steps|epoch
  bool load_best_model_at_end = false;
  std::string metric_for_best_model = "eval_loss";  // loss|eval_loss: the one metric evaluation computes
  bool greater_is_better = false;
  int64_t early_stopping_patience = 0;  // EarlyStoppingCallback; 0: off
  double early_stopping_threshold = 0.0;

  // --- data
  std::string dataset;               // file, directory or hub id in the local HF cache (data/dataset_source.h)
  std::string dataset_split = "train";  // the split of --dataset to train on (HF datasets' file-name rules)
  std::string eval_dataset;          // a file, directory or hub id, or the name of a split of --dataset
  double eval_split = 0.0;           // fraction of the training rows held out for evaluation
  int64_t eval_steps = 0;            // 0: evaluate only at the end (when there is eval data)
  std::string chat_template = "auto";  // a name of data/chat_template.h: chat_template_names(), or a file
  std::string chat_template_kwargs;    // JSON object; empty: none
  std::string dataset_weights;         // comma-separated, one per --dataset entry; empty: all 1
  std::string raw_text_file;
  int64_t chunk_size = 2048;
  int64_t stride = 512;
  bool train_on_completions = true;
  bool skip_bad_rows = false;
  bool group_by_length = false;
  bool packing = false;
  bool shuffle = true;
  bool dataloader_drop_last = false;

  // --- preference training (dpo, orpo: TRL 1.16's DPOConfig / ORPOConfig)
  double beta = 0.1;                     // DPO's and ORPO's beta
  std::string loss_type = "sigmoid";     // dpo: train/preference_loss.h dpo_loss_types()
  double label_smoothing = 0.0;          // dpo --loss_type robust: the label noise e in [0, 0.5)
  std::string truncation_mode = "keep_start";  // dpo: keep_start|keep_end (data/preference_rows.h)
  bool precompute_ref_log_probs = false;  // dpo: the reference's log-probs once, before training

  // --- saving
  std::string output_dir = "outputs";
  int64_t save_steps = 0;            // 0: only the final save
  int64_t save_total_limit = 0;      // keep the newest K checkpoints; 0: all
  std::string resume_from_checkpoint;  // checkpoint dir, or "true": the newest in output_dir
  bool overwrite_output_dir = false;   // replace an earlier run's files in output_dir
  bool save_only_model = false;      // checkpoints hold the adapter and trainer_state.json only (not resumable)
  bool save_model = false;           // also export per --save_method into --save_path
  std::string save_method = "merged_16bit";  // checkpoint/save_methods.h; Unsloth CLI's default
  std::string save_path = "model";
  bool push_model = false;           // upload the saved model (or the adapter) to --hub_path
  std::string hub_path;              // ORG/NAME of the hub repo to push to
  std::string hub_token;             // else HF_TOKEN, else the token file (hub/hub_settings.h)
  bool hub_private_repo = false;     // create the --hub_path repo private
  std::string quantization = "q8_0"; // GGUF tensor type(s), comma-separated (gguf/quantization_names.h)
  bool save_gguf = false;            // also write a GGUF file (per --quantization) into --save_path
  bool push_gguf = false;            // upload the GGUF files (and Modelfile) to --hub_path (Unsloth: store_true)

  // --- generation (generate, chat; --adapter also for export)
  std::string adapter;               // PEFT adapter directory applied to --model_name
  std::string prompt;                // generate: one prompt
  std::string prompts;               // generate: a JSONL file of prompts ({"prompt": ...} or {"messages": [...]})
  int64_t max_new_tokens = 256;
  double temperature = 0.0;          // 0: greedy; > 0: sample
  double top_p = 1.0;
  int64_t top_k = 0;                 // 0: off
  double repetition_penalty = 1.0;
  std::string stop;                  // stop string, or a JSON list of them
  std::string system_prompt;         // chat: the system message
  int64_t generation_batch_size = 8; // generate: prompts decoded together

  // --- logging
  std::string report_to = "none";    // none|jsonl|tensorboard|all (metrics.jsonl is always written)
  std::string log_level = "info";    // util/log.h: level_names()
  bool require_loss_decrease = false;  // exit 1 unless the last steps' loss is below the first steps
  int64_t logging_steps = 1;
  std::string dump_logits;           // eval: write logits to this .safetensors file
  int64_t profile_start_step = 0;    // profile optimizer steps from this one (1-based); 0 = off
  int64_t profile_steps = 3;         // how many steps the profile covers

  // --- distributed
  double ddp_timeout = kDefaultDdpTimeoutSeconds;         // seconds without progress before aborting
  int64_t ddp_bucket_cap_mb = kDefaultBucketCapMb;
  bool ddp_find_unused_parameters = false;
  int64_t ddp_check_consistency_steps = 0;
  std::string ddp_backend = "auto";  // auto|nccl|gloo

  // The options set by the config file, the environment or the command line (not defaults).
  std::set<std::string> given;
};

// The commands of the `finetune` executable (main.cpp dispatches on them).
enum class Action { Train, Eval, Generate, Chat, Export, Plot, Dpo, Orpo };
// The commands that train an adapter: train (SFT), dpo and orpo (preference pairs).
bool is_training_action(Action action);

// One command: its word, what it does and its usage line, in the order the help lists them.
struct ActionInfo {
  Action action;
  std::string name;     // the first positional word: "export"
  std::string summary;  // one line for `finetune --help`
  std::string usage;    // the usage line of `finetune NAME --help`
};
const std::vector<ActionInfo>& action_table();
const std::string& action_name(Action action);
std::vector<std::string> action_names();

// One row of the option table.
struct OptionSpec {
  std::string name;        // flag without dashes, also the config-file key
  std::string group;       // model|LoRA|training|data|saving|generation|logging|distributed
  std::string type;        // int|float|bool|string|list
  std::string default_value;
  std::string help;
  std::vector<std::string> choices;  // the accepted values of a choice option (or a list's items)
  std::vector<std::string> aliases;  // other names, accepted wherever the name is (flag, file key, FINETUNE_*)
  std::vector<Action> commands;      // the commands that read it (README: "Options and commands")

  bool read_by(Action action) const;
};

const std::vector<OptionSpec>& option_table();

// --report_to's values and the sinks each one adds (metrics.jsonl is always written).
struct ReportTarget {
  std::string name;
  bool tensorboard = false;
};
const std::vector<ReportTarget>& report_targets();
const ReportTarget& report_target(const std::string& name);  // a value of report_targets(); Error otherwise

struct Command {
  Action action = Action::Train;
  Options options;
  std::string config_file;       // --config, if given
  bool help = false;             // --help was given: usage text is in help_text
  bool version = false;          // --version was given
  std::string help_text;
  // Settings of the config file or the environment that this command does not read (each said
  // once at debug level by main, after the log level is known): shared between commands, they
  // are ignored rather than refused. On the command line such an option is a UsageError.
  std::vector<std::string> ignored_settings;
  // `finetune plot`'s own words (run directories, --out): it reads no option of the table
  // (commands/plot_command.h parses them).
  std::vector<std::string> plot_words;
};

// Parses argv (argv[0] is the program name; an optional first positional word picks the command)
// layered over the config file named by --config and over FINETUNE_<KEY> entries of `env`.
// Throws UsageError naming the option on an unknown option, an option the command does not read
// (naming the command and the ones that read it), a bad value or a value out of range, and naming
// the variable on a FINETUNE_* variable that is neither an option nor one the project's scripts
// export (README: Options).
Command parse_command(int argc, const char* const* argv, const EnvMap& env);

// `finetune --help`: the commands and how options are given.
std::string usage_text();
// `finetune COMMAND --help`: the command's usage line and the options it reads, grouped.
std::string usage_text(Action action);

}  // namespace finetune
