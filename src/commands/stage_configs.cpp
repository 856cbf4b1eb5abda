#include "finetune/commands/stage_configs.h"

#include <algorithm>
#include <cmath>

#include "finetune/checkpoint/save_methods.h"
#include "finetune/hub/cache_lookup.h"
#include "finetune/train/lr_schedule.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/text.h"

namespace finetune {

ModelSource model_source_from(const Options& options) {
  return {options.model_name, options.dtype, options.device, options.load_in_4bit, options.revision};
}

const std::vector<LoraShapeOption>& lora_shape_options() {
  static const std::vector<LoraShapeOption> options = {
      {"r", [](const LoraConfig& c) { return std::to_string(c.r); }},
      {"lora_alpha", [](const LoraConfig& c) { return c10::str(c.lora_alpha); }},
      {"use_rslora", [](const LoraConfig& c) { return std::string(c.use_rslora ? "true" : "false"); }},
      {"use_dora", [](const LoraConfig& c) { return std::string(c.use_dora ? "true" : "false"); }},
      {"target_modules", [](const LoraConfig& c) { return join(c.target_modules, ","); }},
      {"target_parameters", [](const LoraConfig& c) { return join(c.target_parameters, ","); }},
      {"bias", [](const LoraConfig& c) { return c.bias; }},
      {"modules_to_save", [](const LoraConfig& c) { return join(c.modules_to_save, ","); }},
  };
  return options;
}

AdapterSetup adapter_setup_from(const Options& options) {
  AdapterSetup setup;
  setup.lora.r = options.r;
  setup.lora.lora_alpha = options.lora_alpha;
  setup.lora.lora_dropout = options.lora_dropout;
  setup.lora.use_rslora = options.use_rslora;
  setup.lora.use_dora = options.use_dora;
  setup.lora.target_modules = options.target_modules;
  setup.lora.target_parameters = options.target_parameters;
  setup.lora.bias = options.bias;
  setup.lora.modules_to_save = options.modules_to_save;
  setup.gradient_checkpointing = options.use_gradient_checkpointing;
  setup.lora_operand_cache = options.lora_operand_cache;
  // train reads --init_adapter, generate/chat/export --adapter, eval either (the parser refuses
  // both at once): one adapter to load, named as the user named it.
  const bool adapter_named = options.init_adapter.empty() && !options.adapter.empty();
  setup.init_adapter = adapter_named ? options.adapter : options.init_adapter;
  setup.adapter_option = adapter_named ? "--adapter" : "--init_adapter";
  setup.random_state = static_cast<uint64_t>(options.random_state);
  setup.base_model_name = options.model_name;
  for (const auto& option : lora_shape_options()) {
    if (options.given.count(option.name)) setup.given_lora_options.push_back(option.name);
  }
  return setup;
}

ModelStageSetup model_stage_setup_from(const Options& options, Action action) {
  ModelStageSetup setup;
  setup.source = model_source_from(options);
  setup.adapter = adapter_setup_from(options);
  setup.fresh_adapter = is_training_action(action);
  setup.needs_tokenizer = action == Action::Generate || action == Action::Chat;
  setup.command = action_name(action);
  return setup;
}

namespace {

std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = trim(text.substr(start, comma - start));
    if (!item.empty()) items.push_back(item);
    start = comma + 1;
  }
  return items;
}

std::vector<double> dataset_weights_from(const std::string& text, size_t datasets) {
  if (text.empty()) return std::vector<double>(datasets, 1.0);
  std::vector<double> weights;
  for (const std::string& item : comma_list(text)) {
    size_t used = 0;
    double weight = 0;
    try {
      weight = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !std::isfinite(weight) || weight < 0) {
      throw UsageError("--dataset_weights: \"" + item + "\" is not a non-negative number");
    }
    weights.push_back(weight);
  }
  if (weights.size() != datasets) {
    throw UsageError("--dataset_weights has " + std::to_string(weights.size()) + " weights but --dataset names " +
                     std::to_string(datasets) + " datasets");
  }
  return weights;
}

}  // namespace

DataSetup data_setup_from(const Options& options) {
  DataSetup setup;
  setup.datasets = comma_list(options.dataset);
  setup.dataset_weights = dataset_weights_from(options.dataset_weights, setup.datasets.size());
  setup.dataset_split = options.dataset_split;
  setup.eval_dataset = options.eval_dataset;
  setup.eval_split = options.eval_split;
  setup.seed = static_cast<uint64_t>(options.seed);
  setup.chat_template = options.chat_template;
  if (!trim(options.chat_template_kwargs).empty()) {
    try {
      setup.chat_template_kwargs = parse_ordered_json(options.chat_template_kwargs, "--chat_template_kwargs");
    } catch (const JsonSyntaxError& e) {
      throw UsageError(e.what());
    }
    if (!setup.chat_template_kwargs.is_object()) {
      throw UsageError("--chat_template_kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}'");
    }
  }
  setup.max_seq_length = options.max_seq_length;
  setup.train_on_completions = options.train_on_completions;
  setup.skip_bad_rows = options.skip_bad_rows;
  setup.raw_text_file = options.raw_text_file;
  setup.raw_text.chunk_size = options.chunk_size;
  setup.raw_text.stride = options.stride;
  if (!setup.raw_text_file.empty() && !setup.datasets.empty()) {
    throw UsageError("--raw_text_file and --dataset are alternatives: give one");
  }
  return setup;
}

CommunicatorOptions communicator_options_from(const Options& options) {
  CommunicatorOptions out;
  out.backend = options.ddp_backend;
  out.timeout_seconds = options.ddp_timeout;
  return out;
}

MicroBatchStreamConfig stream_config_from(const Options& options, const LaunchEnv& launch, int64_t pad_token_id,
                                          bool padding_free) {
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
  config.planning = step_planning_from_name(options.step_planning);
  // NEFTune's scale reads each micro-batch's longest sample: HF's micro-batches (option_parser.cpp refuses another).
  if (options.neftune_noise_alpha > 0) config.planning = StepPlanning::literal;
  config.padding_free = padding_free;
  return config;
}

bool steps_from_epochs(const Options& options) {
  return options.max_steps <= 0 || (options.given.count("num_train_epochs") && !options.given.count("max_steps"));
}

int64_t total_steps_from(const Options& options, int64_t steps_per_epoch) {
  if (!steps_from_epochs(options)) return options.max_steps;
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
  config.eval_strategy = interval_strategy_from_name(options.eval_strategy);
  config.save_strategy = interval_strategy_from_name(options.save_strategy);
  config.greater_is_better = options.greater_is_better;
  config.early_stopping_patience = options.early_stopping_patience;
  config.early_stopping_threshold = options.early_stopping_threshold;
  config.learning_rate = options.learning_rate;
  config.schedule = lr_schedule_from(options.lr_scheduler_type,
                                     resolve_warmup_steps(options.warmup_steps, options.warmup_ratio, total_steps),
                                     total_steps, options.learning_rate,
                                     parse_lr_scheduler_kwargs(options.lr_scheduler_kwargs));
  config.optim = options.optim;
  config.adamw = {options.adam_beta1, options.adam_beta2, options.adam_epsilon, options.weight_decay};
  config.max_grad_norm = options.max_grad_norm;
  config.gradient_checkpointing = options.use_gradient_checkpointing;
  config.cuda_graphs = options.cuda_graphs;
  config.neftune_noise_alpha = options.neftune_noise_alpha;
  config.offload_activations = offload_activations_from_name(options.offload_activations);
  config.output_dir = options.output_dir;
  config.ddp_check_consistency_steps = options.ddp_check_consistency_steps;
  config.ddp_bucket_cap_mb = options.ddp_bucket_cap_mb;
  config.ddp_find_unused_parameters = options.ddp_find_unused_parameters;
  config.profile_start_step = options.profile_start_step;
  config.profile_steps = options.profile_steps;
  config.seed = static_cast<uint64_t>(options.seed);
  config.tensorboard = report_target(options.report_to).tensorboard;
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
  identity.optim = options.optim;
  return identity;
}

PushSetup push_setup_from(const Options& options) {
  PushSetup setup{options.push_model, options.hub_path, options.hub_token, options.hub_private_repo};
  if (setup.push && !looks_like_hub_id(setup.hub_path)) {
    throw UsageError("--push_model needs --hub_path ORG/NAME, the hub repo to upload to" +
                     (setup.hub_path.empty() ? std::string() : " (got \"" + setup.hub_path + "\")"));
  }
  return setup;
}

ExportSetup export_setup_from(const Options& options) {
  ExportConfig config;
  config.save_method = save_method_from_name(options.save_method);
  config.save_path = options.save_path;
  config.base_model_name = options.model_name;
  config.quantization = comma_list(options.quantization);  // already normalized by the parser
  config.save_gguf = options.save_gguf && config.save_method != SaveMethod::Gguf;
  config.push_gguf = options.push_gguf ? options.hub_path : "";
  config.hub_private_repo = options.hub_private_repo;
  if (options.push_gguf && !looks_like_hub_id(options.hub_path)) {
    throw UsageError("--push_gguf needs --hub_path ORG/NAME, the hub repo to upload to" +
                     (options.hub_path.empty() ? std::string() : " (got \"" + options.hub_path + "\")"));
  }
  const bool writes_gguf = config.save_method == SaveMethod::Gguf || config.save_method == SaveMethod::GgufLora ||
                           config.save_gguf;
  if (config.save_method == SaveMethod::GgufLora && (options.bias != "none" || !options.modules_to_save.empty())) {
    throw UsageError("--save_method gguf_lora: " +
                     (options.bias != "none" ? "--bias " + options.bias + " trains biases"
                                             : "--modules_to_save " + join(options.modules_to_save, ",") +
                                                   " trains whole modules") +
                     ", which a GGUF LoRA adapter cannot carry; export merged (merged_16bit or gguf) instead");
  }
  if (options.push_gguf && !writes_gguf) {
    throw UsageError("--push_gguf: uploads the GGUF files an export writes; add --save_method gguf (or gguf_lora) "
                     "or --save_gguf");
  }
  return {options.save_model, config};
}

GenerationConfig generation_config_from(const Options& options) {
  GenerationConfig config;
  config.max_new_tokens = options.max_new_tokens;
  config.temperature = options.temperature;
  config.top_p = options.top_p;
  config.top_k = options.top_k;
  config.repetition_penalty = options.repetition_penalty;
  config.stop_strings = parse_stop_strings(options.stop);
  config.batch_size = options.generation_batch_size;
  config.seed = static_cast<uint64_t>(options.seed);
  config.profile_start_step = options.profile_start_step;
  config.profile_steps = options.profile_steps;
  config.profile_dir = options.output_dir;
  return config;
}

}  // namespace finetune
