#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "finetune/data/micro_batch_stream.h"
#include "finetune/dist/communicator.h"
#include "finetune/dist/rendezvous.h"
#include "finetune/export/merged_export.h"
#include "finetune/launch/launch_env.h"
#include "finetune/model/device_memory.h"
#include "finetune/model/device_selection.h"
#include "finetune/train/commands.h"
#include "finetune/train/evaluate.h"
#include "finetune/train/run_setup.h"
#include "finetune/train/trainer.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/output_directory.h"

namespace finetune {
namespace {

std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return digits;
}

void print_banner(const Options& options, const LaunchEnv& launch, const LoadedModel& loaded, const at::Device& device,
                  const LoraConfig& lora, const NamedTensors& trainable, const Datasets& data, const MicroBatchStream& stream,
                  int64_t total_steps, int64_t warmup_steps) {
  int64_t trainable_count = 0;
  for (const auto& [name, tensor] : trainable) trainable_count += tensor.numel();
  const auto& model = *loaded.model;
  const auto& stats = data.train.stats;
  const int64_t global_batch = options.per_device_train_batch_size * options.gradient_accumulation_steps * launch.world_size;
  log::info("finetune | model " + model.config().architecture + " from " + loaded.model_dir + " (" +
            with_thousands(model.parameter_count()) + " parameters, " + dtype_string(model.dtype()) + " on " +
            device.str() + ", loaded in " + c10::str(loaded.load_seconds) + " s)");
  log::info("LoRA r=" + std::to_string(lora.r) + " alpha=" + c10::str(lora.lora_alpha) +
            (lora.use_rslora ? " (rsLoRA)" : "") + " dropout=" + c10::str(lora.lora_dropout) + " | trainable " +
            with_thousands(trainable_count) + " parameters (" +
            c10::str(100.0 * static_cast<double>(trainable_count) / static_cast<double>(model.parameter_count())) + "%)");
  log::info("data " + options.dataset + ": " + with_thousands(stats.rows_kept) + " rows kept of " +
            with_thousands(stats.rows_read) + " (" + std::to_string(stats.rows_no_trainable) + " without trainable tokens, " +
            std::to_string(stats.rows_bad) + " malformed skipped, " + std::to_string(stats.rows_truncated) +
            " truncated), " + with_thousands(stats.tokens) + " tokens, " + with_thousands(stats.trainable_tokens) +
            " trainable" + (data.eval ? " | eval rows " + std::to_string(data.eval->samples.size()) : ""));
  log::info("batch " + std::to_string(options.per_device_train_batch_size) + " per device x " +
            std::to_string(options.gradient_accumulation_steps) + " accumulation x " + std::to_string(launch.world_size) +
            " ranks = " + std::to_string(global_batch) + " | " + std::to_string(stream.steps_per_epoch()) +
            " steps per epoch, " + std::to_string(total_steps) + " steps, " + std::to_string(warmup_steps) +
            " warmup | launcher " + launcher_name(launch.launcher));
}

void save_final(CausalLM& model, const LoraConfig& lora, const Options& options, const std::string& model_dir) {
  save_adapter(model, lora, options.model_name, options.output_dir);
  log::info("adapter saved to " + options.output_dir);
  if (!options.save_model) return;
  if (options.save_method == "lora") {
    save_adapter(model, lora, options.model_name, options.save_path);
  } else if (options.save_method == "merged_16bit") {
    export_merged(model, model_dir, options.save_path);
  } else {
    throw UsageError("--save_method: '" + options.save_method + "' is not supported (lora, merged_16bit)");
  }
  log::info("model saved to " + options.save_path + " (" + options.save_method + ")");
}

}  // namespace

int run_train(const Options& options, const EnvMap& env) {
  const Rendezvous rendezvous(launch_env_from(env));
  const auto& launch = rendezvous.launch();
  log::configure(launch.rank, launch.world_size);
  const auto device = select_device(options.device, launch.local_rank);
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
  CommunicatorOptions communicator_options;
  communicator_options.backend = options.ddp_backend;
  communicator_options.timeout_seconds = options.ddp_timeout;
  auto communicator = make_communicator(launch, device, communicator_options);
  try {
    if (launch.rank == 0) {  // fail before hours of training, not at the final save
      create_output_directory(options.output_dir, "--output_dir");
      if (options.save_model) create_output_directory(options.save_path, "--save_path");
    }
    auto loaded = load_model(options, env, device);
    auto& model = *loaded.model;
    auto [lora, trainable] = setup_lora(model, options);
    const auto data = load_datasets(options, env, loaded.tokenizer.get());

    MicroBatchStreamConfig stream_config;
    stream_config.sampler.world_size = launch.world_size;
    stream_config.sampler.rank = launch.rank;
    stream_config.sampler.seed = static_cast<uint64_t>(options.seed);
    stream_config.sampler.shuffle = options.shuffle;
    stream_config.sampler.drop_last = options.dataloader_drop_last;
    stream_config.batch_size = options.per_device_train_batch_size;
    stream_config.gradient_accumulation_steps = options.gradient_accumulation_steps;
    stream_config.group_by_length = options.group_by_length;
    stream_config.packing = options.packing;
    stream_config.max_seq_length = options.max_seq_length;
    stream_config.pad_token_id = pad_token_id_for(model, loaded.tokenizer.get());
    MicroBatchStream stream(data.train.samples, stream_config);

    TrainerConfig config;
    config.total_steps = options.max_steps > 0
                             ? options.max_steps
                             : static_cast<int64_t>(std::ceil(options.num_train_epochs * static_cast<double>(stream.steps_per_epoch())));
    config.logging_steps = options.logging_steps;
    config.save_steps = options.save_steps;
    config.eval_steps = options.eval_steps;
    config.learning_rate = options.learning_rate;
    config.schedule.type = options.lr_scheduler_type;
    config.schedule.total_steps = config.total_steps;
    config.schedule.warmup_steps = resolve_warmup_steps(options.warmup_steps, options.warmup_ratio, config.total_steps);
    config.adamw = {options.adam_beta1, options.adam_beta2, options.adam_epsilon, options.weight_decay};
    config.max_grad_norm = options.max_grad_norm;
    config.gradient_checkpointing = options.use_gradient_checkpointing;
    config.output_dir = options.output_dir;
    config.ddp_check_consistency_steps = options.ddp_check_consistency_steps;
    config.ddp_bucket_cap_mb = options.ddp_bucket_cap_mb;
    config.ddp_find_unused_parameters = options.ddp_find_unused_parameters;
    config.profile_start_step = options.profile_start_step;
    config.profile_steps = options.profile_steps;
    if (launch.rank == 0) {
      print_banner(options, launch, loaded, device, lora, trainable, data, stream, config.total_steps, config.schedule.warmup_steps);
    }

    TrainerHooks hooks;
    const int64_t pad_id = stream_config.pad_token_id;
    if (data.eval) {
      hooks.evaluate = [&]() -> std::optional<double> {
        std::vector<int64_t> shard;  // rank r scores rows r, r+world, ...: every row exactly once
        for (int64_t i = launch.rank; i < static_cast<int64_t>(data.eval->samples.size()); i += launch.world_size) {
          shard.push_back(i);
        }
        const auto local = evaluate(model, data.eval->samples, shard, options.per_device_eval_batch_size, pad_id);
        auto sums = at::tensor({local.loss_sum, static_cast<double>(local.tokens)}, at::TensorOptions().dtype(at::kDouble)).to(device);
        communicator->all_reduce(sums, ReduceOp::Sum, "evaluation loss");
        auto host = sums.cpu();
        return host[0].item<double>() / host[1].item<double>();
      };
    }
    hooks.save_checkpoint = [&](const std::string& dir) { save_adapter(model, lora, options.model_name, dir); };

    if (launch.rank == 0) {
      if (const auto memory = peak_device_memory_gib(device)) log::info("GPU memory after load: " + c10::str(*memory) + " GiB");
    }
    const auto result = train(model, trainable, stream, *communicator, config, hooks);
    if (launch.rank == 0) save_final(model, lora, options, loaded.model_dir);
    communicator->barrier("final save");
    if (launch.rank == 0) {
      nlohmann::json summary = {{"steps", config.total_steps},
                                {"train_loss", result.step_losses.empty() ? 0.0 : result.step_losses.back()},
                                {"tokens", result.tokens},
                                {"elapsed_s", result.elapsed_s},
                                {"tokens_per_s", static_cast<double>(result.tokens) / std::max(1e-9, result.elapsed_s)}};
      if (result.final_eval_loss) summary["eval_loss"] = *result.final_eval_loss;
      if (const auto peak = peak_device_memory_gib(device)) summary["peak_memory_gib"] = *peak;
      std::cout << summary.dump() << std::endl;
    }
  } catch (...) {
    communicator->abort();  // release the peers at once instead of leaving them to time out
    throw;
  }
  return 0;
}

}  // namespace finetune
