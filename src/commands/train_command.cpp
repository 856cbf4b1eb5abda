// `finetune train`, `finetune dpo`, `finetune orpo`: launch env -> communicator -> model + weights
// -> adapter -> data -> trainer -> adapter save / export, with checkpoints to resume from. Only
// wiring: each stage gets its own config (stage_configs.h); the preference commands differ in their
// rows, their stream's pair units and their objective (preference_setup.h).
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "finetune/checkpoint/adapter_io.h"
#include "finetune/export/gguf_push.h"
#include "finetune/export/model_export.h"
#include "finetune/checkpoint/run_checkpoint.h"
#include "finetune/checkpoint/run_directory.h"
#include "finetune/util/run_lock.h"
#include "finetune/hub/cache_lookup.h"
#include "finetune/commands/banner.h"
#include "finetune/commands/commands.h"
#include "finetune/commands/gguf_precheck.h"
#include "finetune/commands/preference_setup.h"
#include "finetune/io/model_config.h"
#include "finetune/util/text.h"
#include "finetune/commands/rank_settings_from.h"
#include "finetune/commands/run_setup.h"
#include "finetune/commands/stage_configs.h"
#include "finetune/commands/hub_inputs.h"
#include "finetune/hub/hub_upload.h"
#include "finetune/launch/environment.h"
#include "finetune/launch/stop_request.h"
#include "finetune/ddp/communicator.h"
#include "finetune/report/html_report.h"
#include "finetune/ddp/ddp_error.h"
#include "finetune/ddp/rank0_agreement.h"
#include "finetune/ddp/rendezvous.h"
#include "finetune/model/device_memory.h"
#include "finetune/model/device_selection.h"
#include "finetune/train/evaluate.h"
#include "finetune/train/loss_trend.h"
#include "finetune/train/trainer.h"
#include "finetune/util/atomic_directory.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/output_directory.h"

namespace finetune {
namespace {

// What a failed final save left: the run's files in output_dir and whatever is in save_path, as
// the file system has them at that moment ("OUTPUT_DIR: a, b; SAVE_PATH: nothing").
std::string describe_on_disk(const std::string& output_dir, const std::string& save_path) {
  auto listing = [](const std::string& dir, const std::vector<std::string>& names) {
    return dir + ": " + (names.empty() ? std::string("nothing") : join(names, ", "));
  };
  std::string text = listing(output_dir, run_artifacts(output_dir));
  if (!save_path.empty()) {
    std::vector<std::string> names;
    std::error_code error;
    for (std::filesystem::directory_iterator it(save_path, error), end; !error && it != end; it.increment(error)) {
      names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    text += "; " + listing(save_path, names);
  }
  return text;
}

// The adapter and the loss curves (report.html) into --output_dir, then the export; a failure
// keeps the checkpoints and says what is on disk and where the newest checkpoint is. Returns the
// GGUF files written.
std::vector<std::string> save_final(const CausalLM& model, const LoraConfig& lora, const ExportSetup& export_setup,
                                    const std::string& output_dir, const std::string& run_name,
                                    const std::string& model_dir, const std::string& last_checkpoint) {
  const auto& config = export_setup.export_config;
  try {
    save_adapter(model, lora, config.base_model_name, output_dir);
    log::info("adapter saved to " + output_dir);
    const auto report = (std::filesystem::path(output_dir) / "report.html").string();
    auto metrics = read_run_metrics(output_dir);
    if (!run_name.empty()) metrics.name = run_name;
    write_html_report({metrics}, report);
    log::info("loss curves: " + report + " (finetune plot RUN_DIR... overlays runs)");
    if (!export_setup.save_model) return {};
    auto gguf_files = export_model(model, lora, config, model_dir);
    log::info("model saved to " + config.save_path + " (" + save_method_name(config.save_method) + ")");
    for (const auto& file : gguf_files) log::info("GGUF written: " + file);
    return gguf_files;
  } catch (const std::exception& e) {
    throw Error(std::string("final save failed: ") + e.what() + "; on disk: " +
                describe_on_disk(output_dir, export_setup.save_model ? config.save_path : "") + "; " +
                (last_checkpoint.empty() ? "no checkpoint was written (--save_steps)"
                                         : "the last checkpoint, " + last_checkpoint + ", is intact"));
  }
}

// --output_dir's reuse rule on every rank (a read-only look, so all ranks agree), then rank 0
// clears or tidies it.
void prepare_output_dir(const RunDirectorySetup& setup, const LaunchEnv& launch) {
  check_output_dir_reuse(setup.output_dir, setup.overwrite_output_dir, !setup.resume_from_checkpoint.empty());
  if (launch.rank != 0) return;
  create_output_directory(setup.output_dir, "--output_dir");
  if (setup.overwrite_output_dir) clear_run_artifacts(setup.output_dir);
  for (const auto& name : remove_stale_temp_directories(setup.output_dir)) {
    log::info("removed " + name + ", left in " + setup.output_dir + " by a run that stopped while saving");
  }
}

// The adapter files (and the tokenizer files, when present) of output_dir: not its checkpoints,
// metrics or run state.
std::vector<std::string> adapter_files_to_push(const std::string& output_dir) {
  std::vector<std::string> files;
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer.json",
                           "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "chat_template.jinja"}) {
    if (std::filesystem::is_regular_file(std::filesystem::path(output_dir) / name)) files.push_back(name);
  }
  return files;
}

void push_final(const PushSetup& push, const ExportSetup& export_setup, const std::string& output_dir, const EnvMap& env) {
  PushRequest request;
  request.repo_id = push.hub_path;
  request.private_repo = push.private_repo;
  if (export_setup.save_model) {
    request.folder = export_setup.export_config.save_path;
    request.commit_message = std::string("Upload ") + save_method_name(export_setup.export_config.save_method) + " model with finetune";
  } else {
    request.folder = output_dir;
    request.files = adapter_files_to_push(output_dir);
    request.commit_message = "Upload LoRA adapter with finetune";
  }
  const auto settings = hub_settings_from(env, push.hub_token);
  log::info("pushing " + request.folder + " to " + settings.endpoint + "/" + request.repo_id);
  log::info("pushed: " + push_to_hub(settings, request));
}

// A GGUF export at the end (--save_method gguf, --save_gguf) that cannot succeed fails now, not
// after training.
void check_gguf_export_before_training(const ExportSetup& export_setup, const std::string& model_dir) {
  const auto& config = export_setup.export_config;
  const bool gguf_method = config.save_method == SaveMethod::Gguf;
  if (!export_setup.save_model || !(gguf_method || config.save_gguf)) return;
  check_gguf_export_possible(load_model_config(model_dir), model_dir, config.quantization,
                             gguf_method ? "--save_method gguf" : "--save_gguf");
}

// HF's eval_strategy / load_best_model_at_end / EarlyStoppingCallback need evaluation data; given
// without it they would do nothing, so they are refused.
void check_evaluation_data(const Options& options, bool has_eval_data) {
  if (has_eval_data) return;
  const std::string needs = ": needs evaluation data (--eval_dataset or --eval_split)";
  if (options.load_best_model_at_end) throw UsageError("--load_best_model_at_end" + needs);
  if (options.early_stopping_patience > 0) throw UsageError("--early_stopping_patience" + needs);
  if (options.given.count("eval_strategy") && options.eval_strategy != "no") throw UsageError("--eval_strategy" + needs);
}

// --load_best_model_at_end: the adapter of the best evaluation's checkpoint (HF's
// best_model_checkpoint) replaces the trained one before the final save, on every rank.
void load_best_model(CausalLM& model, const TrainResult& result, int64_t rank) {
  if (result.best_checkpoint.empty()) {
    if (rank == 0) log::warn("--load_best_model_at_end: no checkpoint holds the best evaluation; the last weights are saved");
    return;
  }
  load_adapter_weights(model, result.best_checkpoint);
  if (rank == 0) {
    log::info("loaded the best model, " + result.best_checkpoint + " (eval_loss " + c10::str(*result.best_metric) + ")");
  }
}

// The summary's run name, best evaluation and early stop.
void add_best_model(nlohmann::json& summary, const TrainResult& result, const Options& options) {
  if (!options.run_name.empty()) summary["run_name"] = options.run_name;
  if (result.best_metric) summary["best_metric"] = *result.best_metric;
  if (!result.best_checkpoint.empty()) summary["best_model_checkpoint"] = result.best_checkpoint;
  if (result.stopped_early_at) summary["stopped_early_at_step"] = *result.stopped_early_at;
}

// SFT's rows (with evaluation data), or the preference commands' pairs.
Datasets load_training_data(Action action, const Options& options, const DataSplits& splits, const DataSetup& setup,
                            const Tokenizer* tokenizer, int64_t vocab_size) {
  if (action == Action::Train) return load_datasets(splits, setup, tokenizer, vocab_size);
  return load_preference_datasets(splits, setup, tokenizer, preference_dataset_options_from(options, action));
}

// FINETUNE_CUDA_MEMORY_HISTORY=PATH (a benchmark's diagnostic): the allocator's history is recorded
// from before the model loads, and each rank writes its snapshot to PATH (PATH.rankN under DDP)
// when training ends; empty when not asked, or on the CPU (said once). The file is created here,
// so a path that cannot be written fails before the model loads, not after training.
std::string memory_history_path(const EnvMap& env, const LaunchEnv& launch, const at::Device& device) {
  const auto found = env.find("FINETUNE_CUDA_MEMORY_HISTORY");
  if (found == env.end() || found->second.empty()) return "";
  if (!device.is_cuda()) {
    if (launch.rank == 0) log::warn("FINETUNE_CUDA_MEMORY_HISTORY: training on " + device.str() + ", nothing recorded");
    return "";
  }
  const std::string path =
      launch.world_size > 1 ? found->second + ".rank" + std::to_string(launch.rank) : found->second;
  if (!std::ofstream(path, std::ios::binary)) {
    throw UsageError("FINETUNE_CUDA_MEMORY_HISTORY: cannot write " + path);
  }
  return path;
}

// FINETUNE_GRAPHED_ALL_REDUCE (a benchmark's switch): after_replay (the default) or overlapped
// (Note [Bucket all-reduces during a replay] in ddp/grad_reducer.h: slower where it was measured).
bool overlap_graphed_all_reduce(const EnvMap& env) {
  const std::string variable = "FINETUNE_GRAPHED_ALL_REDUCE";
  const std::string value = env_value(env, variable);
  if (value.empty() || value == "after_replay") return false;
  if (value == "overlapped") return true;
  throw UsageError(variable + "=" + value + ": expected after_replay or overlapped");
}

// FINETUNE_CUDA_GRAPH_MAX_TOKENS (a benchmark's switch): the longest micro-step replayed from a CUDA
// graph, in tokens; unset: default_graph_max_tokens (train/micro_step_graphs.h).
std::optional<int64_t> cuda_graph_max_tokens(const EnvMap& env) {
  const std::string variable = "FINETUNE_CUDA_GRAPH_MAX_TOKENS";
  const std::string value = env_value(env, variable);
  if (value.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long tokens = std::strtoll(value.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || tokens < 1 || tokens > (1LL << 30)) {
    throw UsageError(variable + "=" + value + ": expected a positive number of tokens");
  }
  return tokens;
}

int run_training(const Options& options, const EnvMap& env, Action action) {
  StopRequest::install();  // from here a SIGTERM/SIGUSR1 stops training at a step boundary, saved
  const Rendezvous rendezvous(launch_env_from(env));
  const auto& launch = rendezvous.launch();
  log::configure(launch.rank, launch.world_size, log::level_from_name(options.log_level));
  const auto model_setup = model_stage_setup_from(options, action);
  const auto device = select_device(model_setup.source.device, launch.local_rank);
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
  const std::string memory_history = memory_history_path(env, launch, device);
  if (!memory_history.empty()) start_device_memory_history(device);
  auto communicator = make_communicator(launch, device, communicator_options_from(options));
  const auto export_setup = export_setup_from(options);
  const auto push_setup = push_setup_from(options);
  const auto run_directory = run_directory_setup_from(options);
  trainer_config_from(options, /*total_steps=*/1);  // a bad --lr_scheduler_kwargs fails before the model loads
  try {
    const auto data_setup = data_setup_from(options);
    DataSplits data_splits;
    // Hub ids into the cache first (Note [One download per node]); then everything reads the cache.
    std::unique_ptr<RunLock> run_lock;  // held for the whole run (rank 0)
    auto opened = open_model(
        model_setup, hub_inputs_from(model_setup.source, data_setup, true), env, device,
        [&](const HubInputs& inputs) {
          fetch_hub_inputs_per_node(hub_settings_from(env, options.hub_token), inputs, launch, *communicator);
        },
        [&] {
          data_splits = resolve_data_splits(data_setup, env);  // a wrong split fails before the model loads
          const auto& source = model_setup.source;
          check_outputs_apart_from_model({run_directory.output_dir,
                                          export_setup.save_model ? export_setup.export_config.save_path : "",
                                          source.model_name, resolve_model_dir(source.model_name, env, source.revision),
                                          hub_cache_root(env)});
          if (launch.rank == 0) run_lock = std::make_unique<RunLock>(run_directory.output_dir);
          prepare_output_dir(run_directory, launch);  // fail before hours of training, not at the final save
          if (launch.rank == 0 && export_setup.save_model) {
            create_output_directory(export_setup.export_config.save_path, "--save_path");
          }
          check_gguf_export_before_training(export_setup, resolve_model_dir(source.model_name, env, source.revision));
        });
    auto& loaded = opened.loaded;
    auto& model = *loaded.model;
    const AttachedAdapter& adapter = *opened.adapter;
    const auto data =
        load_training_data(action, options, data_splits, data_setup, loaded.tokenizer.get(), model.config().vocab_size);
    if (data.train.samples.empty()) {
      const std::string dropped = describe_dropped_rows(data.train.stats);
      throw Error("the training set is empty: no row has a trainable token" + (dropped.empty() ? "" : " (" + dropped + ")"));
    }

    check_evaluation_data(options, data.eval.has_value());
    const int64_t pad_id = pad_token_id_for(model, loaded.tokenizer.get());
    auto stream_config = stream_config_from(options, launch, pad_id, model.kernel_policy().padding_free_batches);
    if (action != Action::Train) use_pair_units(stream_config, options, action);
    auto objective = training_objective_for(action, options, model, adapter.config, model_setup.adapter.init_adapter);
    if (launch.rank == 0 && action != Action::Train) log::info("objective: " + objective.description);
    precompute_reference_if_asked(objective, options, data, pad_id, model, launch.rank);
    const std::string dataset_name = options.dataset.empty() ? options.raw_text_file : options.dataset;
    auto identity = run_identity_from(options, launch, adapter.config);
    identity.data = data_identity(dataset_name, data.train.samples, stream_config);  // Note [Resume identity]
    std::optional<TrainingState> resume;
    if (!run_directory.resume_from_checkpoint.empty()) {
      const auto checkpoint = resolve_resume_checkpoint(run_directory.resume_from_checkpoint, run_directory.output_dir);
      for (const auto& notice : check_resume_compatible(read_run_identity(checkpoint), identity)) log::warn(notice);
      resume = read_training_state(checkpoint, adapter.trainable);
      load_adapter_weights(model, checkpoint);
      log::info("resuming from " + checkpoint + " at step " + std::to_string(resume->global_step));
    }
    MicroBatchStream stream(data.train.samples, stream_config);
    auto config = trainer_config_from(options, total_steps_from(options, stream.steps_per_epoch()));
    config.overlap_graphed_all_reduce = overlap_graphed_all_reduce(env);
    config.cuda_graph_max_tokens = cuda_graph_max_tokens(env);
    // Note [Ranks agree before the first step]: a rank started with other settings stops them all.
    check_ranks_agree(*communicator, rank_settings_from(options, identity, config, loaded.model_dir));
    if (resume && resume->global_step >= config.total_steps) {
      throw UsageError("--resume_from_checkpoint: the checkpoint is at step " + std::to_string(resume->global_step) +
                       ", and this run has " + std::to_string(config.total_steps) + " steps (raise --max_steps)");
    }
    if (launch.rank == 0) {
      log_banner(loaded, adapter, data, stream, launch,
                 {dataset_name, options.per_device_train_batch_size, options.gradient_accumulation_steps,
                  config.total_steps, config.schedule.warmup_steps, config.optim});
      if (const auto memory = peak_device_memory_gib(device)) log::info("GPU memory after load: " + c10::str(*memory) + " GiB");
    }

    TrainerHooks hooks;
    if (data.eval) {
      hooks.evaluate = [&]() {
        return evaluate_across_ranks(model, data.eval->samples, *communicator, options.per_device_eval_batch_size, pad_id);
      };
    }
    hooks.checkpoint_dir = [&](int64_t step) { return checkpoint_path(config.output_dir, step); };
    hooks.save_checkpoint = [&](const std::string& dir, TrainingState state) {
      state.identity = identity;
      write_checkpoint(dir, model, adapter.config, state, options.save_only_model);
      const auto& best = state.best_model_checkpoint;  // kept, as HF's _rotate_checkpoints keeps it
      for (const auto& removed : prune_checkpoints(run_directory.output_dir, run_directory.save_total_limit, best)) {
        log::info("removed " + removed + " (--save_total_limit " + std::to_string(run_directory.save_total_limit) + ")");
      }
    };

    hooks.stop_requested = [] { return StopRequest::signal_received() != 0; };  // Note [Preemption]
    const auto result =
        train(model, adapter.trainable, stream, *communicator, config, hooks, resume ? &*resume : nullptr, *objective.objective);
    if (!memory_history.empty()) write_device_memory_snapshot(device, memory_history);
    if (options.load_best_model_at_end) load_best_model(model, result, launch.rank);
    std::vector<std::string> gguf_files;
    // Every rank learns the outcome (this is also the final barrier), so all exit alike.
    const auto saved = run_on_rank0_then_agree(*communicator, device, "final save", [&] {
      gguf_files = save_final(model, adapter.config, export_setup, run_directory.output_dir, options.run_name,
                              loaded.model_dir, result.last_checkpoint);
      if (push_setup.push) push_final(push_setup, export_setup, run_directory.output_dir, env);
      if (const auto& repo = export_setup.export_config.push_gguf; !repo.empty()) {
        log::info("pushed: " + push_gguf_files(hub_settings_from(env, push_setup.hub_token), repo,
                                               export_setup.export_config.hub_private_repo, gguf_files));
      }
    });
    if (saved.failed) throw Error(saved.message("final save"));
    communicator->finish();  // after the last collective: Note [Clean exit] in ddp/peer_monitor.h
    if (launch.rank == 0) {
      nlohmann::json summary = {{"steps", result.stopped_early_at.value_or(config.total_steps)},
                                {"train_loss", result.train_loss()},  // the run's mean, as HF Trainer reports it
                                {"tokens", result.tokens},
                                {"elapsed_s", result.elapsed_s},
                                {"tokens_per_s", result.tokens_per_second()},
                                {"rank_imbalance", result.mean_rank_imbalance}};  // mean over metrics.jsonl's lines
      if (result.final_eval_loss) summary["eval_loss"] = *result.final_eval_loss;
      add_best_model(summary, result, options);
      if (const auto peak = peak_device_memory_gib(device)) summary["peak_memory_gib"] = *peak;
      summary["outputs"] = run_outputs(run_directory.output_dir, export_setup, gguf_files);
      std::cout << summary.dump() << std::endl;
    }
    if (options.require_loss_decrease) require_loss_decrease(result.step_losses);  // same losses on every rank
  } catch (const Preempted&) {
    communicator->finish();  // every rank stopped at the same step after the same collectives
    throw;
  } catch (const std::exception& e) {
    communicator->abort(first_line(e.what()));  // tell the peers at once instead of leaving them to time out
    throw;
  } catch (...) {
    communicator->abort("unknown error");
    throw;
  }
  return 0;
}

}  // namespace

int run_train(const Options& options, const EnvMap& env) { return run_training(options, env, Action::Train); }
int run_dpo(const Options& options, const EnvMap& env) { return run_training(options, env, Action::Dpo); }
int run_orpo(const Options& options, const EnvMap& env) { return run_training(options, env, Action::Orpo); }

}  // namespace finetune
