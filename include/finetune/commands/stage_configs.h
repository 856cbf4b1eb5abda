// The option set, parsed once (config/options.h), cut into each stage's own small config by pure
// functions: no stage below the commands sees `Options`, so each one's dependencies are visible in
// its config type, and each conversion is unit-tested (tests/commands/test_stage_configs.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/config/options.h"
#include "finetune/export/model_export.h"
#include "finetune/train/training_state.h"
#include "finetune/data/dataset.h"
#include "finetune/data/raw_text.h"
#include "finetune/data/micro_batch_stream.h"
#include "finetune/ddp/communicator.h"
#include "finetune/generate/generation_config.h"
#include "finetune/launch/launch_env.h"
#include "finetune/lora/lora_config.h"
#include "finetune/train/trainer.h"

namespace finetune {

// Where the base model comes from and in which dtype it runs.
struct ModelSource {
  std::string model_name;  // directory or hub id
  std::string dtype = "auto";
  std::string device = "auto";
  bool load_in_4bit = false;  // quantize the projections to NF4 at load (a 4-bit checkpoint is 4-bit anyway)
  std::string revision = "main";  // of a hub model: branch, tag or commit
};
ModelSource model_source_from(const Options& options);

// The LoRA options that shape an adapter, each with its value in a LoraConfig as text: a loaded
// adapter's adapter_config.json decides them, so one the user set to another value is refused.
struct LoraShapeOption {
  const char* name;  // the option's name (config/option_table.cpp)
  std::string (*value)(const LoraConfig& config);
};
const std::vector<LoraShapeOption>& lora_shape_options();

// The adapter a command runs: a fresh LoRA from the options (train), or an existing one to load:
// train's --init_adapter, generate/chat/export's --adapter, eval's either (one setting, under two
// names). A loaded adapter's own adapter_config.json decides r, alpha and targets.
struct AdapterSetup {
  LoraConfig lora;           // from the options (r, alpha, dropout, rsLoRA, targets, bias)
  std::string init_adapter;  // the adapter directory to load; empty: none (train: a fresh one)
  std::string adapter_option = "--init_adapter";  // the flag that named it, for messages
  uint64_t random_state = 3407;
  std::string base_model_name;                 // --model_name, to compare with the adapter's base
  std::vector<std::string> given_lora_options;  // which of r, lora_alpha, ... the user set
  bool gradient_checkpointing = true;  // train's: checked against modules_to_save (check_base_tensors_trainable)
  bool lora_operand_cache = false;     // --lora_operand_cache (lora/attach_lora.h: set_lora_operand_cache)
};
AdapterSetup adapter_setup_from(const Options& options);

// What a command runs: the model, its adapter and what it needs of them (run_setup.h: open_model).
struct ModelStageSetup {
  ModelSource source;
  AdapterSetup adapter;
  bool fresh_adapter = false;    // train: attach a new LoRA when no adapter is loaded
  bool needs_tokenizer = false;  // generate, chat: an Error when the model directory has none
  std::string command;           // for messages: "generate"
};
ModelStageSetup model_stage_setup_from(const Options& options, Action action);

// The datasets and how their rows are tokenized (the chat template is chosen later, against the
// tokenizer's own).
struct DataSetup {
  std::vector<std::string> datasets;    // --dataset split at commas
  std::vector<double> dataset_weights;  // one per dataset (all 1 unless --dataset_weights)
  std::string dataset_split = "train";  // the split of each dataset to train on (data/dataset_source.h)
  std::string eval_dataset;             // a path or hub id, or a split of the (first) dataset
  double eval_split = 0;
  uint64_t seed = 3407;      // for the --eval_split hold-out and dataset weights
  std::string chat_template = "auto";
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  int64_t max_seq_length = 2048;
  bool train_on_completions = true;
  bool skip_bad_rows = false;
  std::string raw_text_file;  // instead of datasets
  RawTextOptions raw_text;
};
DataSetup data_setup_from(const Options& options);

CommunicatorOptions communicator_options_from(const Options& options);

// Sampling, batching, accumulation and step planning for this rank; `padding_free`: the model's
// KernelPolicy::padding_free_batches (the batch layout the planner's token budget measures).
MicroBatchStreamConfig stream_config_from(const Options& options, const LaunchEnv& launch, int64_t pad_token_id,
                                          bool padding_free);

// Whether the step count comes from --num_train_epochs: when --max_steps <= 0 (HF's rule: a
// positive max_steps overrides the epochs), and also when --num_train_epochs was given and
// --max_steps was not (its default, 400, is Unsloth's, which a user asking for epochs did not mean).
bool steps_from_epochs(const Options& options);

// Total optimizer steps: ceil(num_train_epochs x steps per epoch) when steps_from_epochs, else
// --max_steps; a count beyond 2^53 (a double's integer range) is a UsageError.
int64_t total_steps_from(const Options& options, int64_t steps_per_epoch);

// The trainer's settings for `total_steps` steps.
TrainerConfig trainer_config_from(const Options& options, int64_t total_steps);

// Where the run lives and how it continues: --output_dir's reuse rule, checkpoints kept, resume.
struct RunDirectorySetup {
  std::string output_dir;
  bool overwrite_output_dir = false;
  std::string resume_from_checkpoint;  // "" (fresh), "true" or a checkpoint directory
  int64_t save_total_limit = 0;
};
RunDirectorySetup run_directory_setup_from(const Options& options);

// The settings a checkpoint records and a resumed run must share (train/training_state.h).
RunIdentity run_identity_from(const Options& options, const LaunchEnv& launch, const LoraConfig& lora);

// What to write after training besides the adapter in --output_dir.
struct ExportSetup {
  bool save_model = false;  // export at all
  ExportConfig export_config;
};
ExportSetup export_setup_from(const Options& options);

// --push_model: after the final save, rank 0 uploads --save_path (with --save_model) or the
// adapter files of output_dir to the hub repo --hub_path (hub/hub_upload.h).
struct PushSetup {
  bool push = false;
  std::string hub_path;
  std::string hub_token;
  bool private_repo = false;
};
PushSetup push_setup_from(const Options& options);  // UsageError without a valid --hub_path

// How generate and chat decode (generate/generation_config.h); --stop parsed into its strings.
GenerationConfig generation_config_from(const Options& options);

}  // namespace finetune
