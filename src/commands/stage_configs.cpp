#include "finetune/commands/stage_configs.h"

#include <cmath>

#include "finetune/train/lr_schedule.h"
#include "finetune/util/errors.h"

namespace finetune {

ModelSource model_source_from(const Options& options) {
  return {options.model_name, options.dtype, options.device};
}

AdapterSetup adapter_setup_from(const Options& options) {
  AdapterSetup setup;
  setup.lora.r = options.r;
  setup.lora.lora_alpha = options.lora_alpha;
  setup.lora.lora_dropout = options.lora_dropout;
  setup.lora.use_rslora = options.use_rslora;
  setup.lora.target_modules = options.target_modules;
  setup.lora.bias = options.bias;
  setup.init_adapter = options.init_adapter;
  setup.random_state = static_cast<uint64_t>(options.random_state);
  setup.base_model_name = options.model_name;
  for (const char* name : {"r", "lora_alpha", "use_rslora", "target_modules", "bias"}) {
    if (options.given.count(name)) setup.given_lora_options.push_back(name);
  }
  return setup;
}

DataSetup data_setup_from(const Options& options) {
  DataSetup setup;
  setup.dataset = options.dataset;
  setup.dataset_split = options.dataset_split;
  setup.eval_dataset = options.eval_dataset;
  setup.eval_split = options.eval_split;
  setup.seed = static_cast<uint64_t>(options.seed);
  setup.chat_template = options.chat_template;
  setup.max_seq_length = options.max_seq_length;
  setup.train_on_completions = options.train_on_completions;
  setup.skip_bad_rows = options.skip_bad_rows;
  return setup;
}

CommunicatorOptions communicator_options_from(const Options& options) {
  CommunicatorOptions out;
  out.backend = options.ddp_backend;
  out.timeout_seconds = options.ddp_timeout;
  return out;
}

MicroBatchStreamConfig stream_config_from(const Options& options, const LaunchEnv& launch, int64_t pad_token_id) {
  MicroBatchStreamConfig config;
  config.sampler.world_size = launch.world_size;
  config.sampler.rank = launch.rank;
  config.sampler.seed = static_cast<uint64_t>(options.seed);
  config.sampler.shuffle = options.shuffle;
  config.sampler.drop_last = options.dataloader_drop_last;
  config.batch_size = options.per_device_train_batch_size;
  config.gradient_accumulation_steps = options.gradient_accumulation_steps;
  config.group_by_length = options.group_by_length;
  config.packing = options.packing;
  config.max_seq_length = options.max_seq_length;
  config.pad_token_id = pad_token_id;
  return config;
}

int64_t total_steps_from(const Options& options, int64_t steps_per_epoch) {
  if (options.max_steps > 0) return options.max_steps;
  const double steps = std::ceil(options.num_train_epochs * static_cast<double>(steps_per_epoch));
  constexpr double kMaxExactSteps = 9007199254740992.0;  // 2^53
  if (!(steps <= kMaxExactSteps)) {
    throw UsageError("--num_train_epochs: " + std::to_string(options.num_train_epochs) + " epochs of " +
                     std::to_string(steps_per_epoch) + " steps is too many steps to count");
  }
  return static_cast<int64_t>(steps);
}

TrainerConfig trainer_config_from(const Options& options, int64_t total_steps) {
  TrainerConfig config;
  config.total_steps = total_steps;
  config.logging_steps = options.logging_steps;
  config.save_steps = options.save_steps;
  config.eval_steps = options.eval_steps;
  config.learning_rate = options.learning_rate;
  config.schedule.type = options.lr_scheduler_type;
  config.schedule.total_steps = total_steps;
  config.schedule.warmup_steps = resolve_warmup_steps(options.warmup_steps, options.warmup_ratio, total_steps);
  config.adamw = {options.adam_beta1, options.adam_beta2, options.adam_epsilon, options.weight_decay};
  config.max_grad_norm = options.max_grad_norm;
  config.gradient_checkpointing = options.use_gradient_checkpointing;
  config.output_dir = options.output_dir;
  config.ddp_check_consistency_steps = options.ddp_check_consistency_steps;
  config.ddp_bucket_cap_mb = options.ddp_bucket_cap_mb;
  config.ddp_find_unused_parameters = options.ddp_find_unused_parameters;
  config.profile_start_step = options.profile_start_step;
  config.profile_steps = options.profile_steps;
  config.seed = static_cast<uint64_t>(options.seed);
  return config;
}

RunDirectorySetup run_directory_setup_from(const Options& options) {
  return {options.output_dir, options.overwrite_output_dir, options.resume_from_checkpoint, options.save_total_limit};
}

RunIdentity run_identity_from(const Options& options, const LaunchEnv& launch, const LoraConfig& lora) {
  RunIdentity identity;
  identity.base_model = options.model_name;
  identity.adapter_config = adapter_config_json(lora, options.model_name);
  identity.world_size = launch.world_size;
  identity.per_device_train_batch_size = options.per_device_train_batch_size;
  identity.gradient_accumulation_steps = options.gradient_accumulation_steps;
  identity.seed = options.seed;
  return identity;
}

ExportSetup export_setup_from(const Options& options) {
  return {options.save_model, {options.save_method, options.save_path, options.model_name}};
}

}  // namespace finetune
