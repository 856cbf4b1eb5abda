#include "finetune/checkpoint/run_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "finetune/checkpoint/adapter_io.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/util/atomic_directory.h"
#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kCheckpointPrefix = "checkpoint-";
const char* const kOptimizerFile = "optimizer.safetensors";
const char* const kRngFile = "rng_state.safetensors";
const char* const kTrainerStateFile = "trainer_state.json";

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// A checkpoint is complete when every file is there (a directory only ever appears whole, but one
// written by another tool or an older version may lack the training state).
bool is_complete_checkpoint(const std::string& dir) {
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors", kOptimizerFile, kRngFile,
                           kTrainerStateFile}) {
    if (!is_file(dir + "/" + file)) return false;
  }
  return true;
}

// A checkpoint of --save_only_model: the adapter and trainer_state.json, no optimizer or generator
// state (HF's save_only_model). It counts for --save_total_limit but cannot be resumed from.
bool is_model_checkpoint(const std::string& dir) {
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors", kTrainerStateFile}) {
    if (!is_file(dir + "/" + file)) return false;
  }
  return true;
}

std::optional<int64_t> checkpoint_step(const std::string& name) {
  const std::string prefix = kCheckpointPrefix;
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

template <typename T>
T field(const json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) throw Error(where + ": missing field '" + key + "'");
  try {
    return object.at(key).get<T>();
  } catch (const json::exception&) {
    throw Error(where + ": field '" + std::string(key) + "' has the wrong type");
  }
}

json data_identity_json(const DataIdentity& data) {
  return {{"dataset", data.dataset},
          {"samples", data.samples},
          {"samples_fingerprint", data.samples_fingerprint},
          {"max_seq_length", data.max_seq_length},
          {"packing", data.packing},
          {"group_by_length", data.group_by_length},
          {"shuffle", data.shuffle}};
}

DataIdentity data_identity_from(const json& object, const std::string& where) {
  DataIdentity data;
  data.dataset = field<std::string>(object, "dataset", where);
  data.samples = field<int64_t>(object, "samples", where);
  data.samples_fingerprint = field<std::string>(object, "samples_fingerprint", where);
  data.max_seq_length = field<int64_t>(object, "max_seq_length", where);
  data.packing = field<bool>(object, "packing", where);
  data.group_by_length = field<bool>(object, "group_by_length", where);
  data.shuffle = field<bool>(object, "shuffle", where);
  return data;
}

json identity_json(const RunIdentity& identity) {
  json object = {{"base_model", identity.base_model},
                 {"adapter_config", identity.adapter_config},
                 {"world_size", identity.world_size},
                 {"per_device_train_batch_size", identity.per_device_train_batch_size},
                 {"gradient_accumulation_steps", identity.gradient_accumulation_steps},
                 {"seed", identity.seed},
                 {"optim", identity.optim}};
  if (identity.data) object["data"] = data_identity_json(*identity.data);
  return object;
}

RunIdentity identity_from(const json& object, const std::string& where) {
  RunIdentity identity;
  identity.base_model = field<std::string>(object, "base_model", where);
  if (!object.contains("adapter_config") || !object.at("adapter_config").is_object()) {
    throw Error(where + ": missing field 'adapter_config'");
  }
  identity.adapter_config = object.at("adapter_config");
  identity.world_size = field<int64_t>(object, "world_size", where);
  identity.per_device_train_batch_size = field<int64_t>(object, "per_device_train_batch_size", where);
  identity.gradient_accumulation_steps = field<int64_t>(object, "gradient_accumulation_steps", where);
  identity.seed = field<int64_t>(object, "seed", where);
  // Absent in checkpoints written before --optim had a choice: torch's AdamW wrote them.
  if (object.contains("optim")) identity.optim = field<std::string>(object, "optim", where);
  // Absent in checkpoints written before the data settings were recorded.
  if (object.contains("data")) identity.data = data_identity_from(object.at("data"), where + ".data");
  if (identity.world_size < 1 || identity.per_device_train_batch_size < 1 || identity.gradient_accumulation_steps < 1) {
    throw Error(where + ": world_size, per_device_train_batch_size and gradient_accumulation_steps must be >= 1");
  }
  return identity;
}

json trainer_state_json(const TrainingState& state) {
  const double epoch = static_cast<double>(state.position.epoch);  // HF's fractional epoch is in log_history
  json document = {{"global_step", state.global_step},
                   {"max_steps", state.total_steps},
                   {"epoch", epoch},
                   {"train_batch_size", state.identity.per_device_train_batch_size},
                   {"log_history", state.metrics.log_history},
                   {"best_metric", state.best_metric ? json(*state.best_metric) : json(nullptr)},
                   {"best_model_checkpoint",
                    state.best_model_checkpoint.empty() ? json(nullptr) : json(state.best_model_checkpoint)},
                   {"finetune",
                    {{"epoch_index", state.position.epoch},
                     {"steps_into_epoch", state.position.steps_into_epoch},
                     {"tokens", state.metrics.tokens},
                     {"step_losses", state.metrics.step_losses},
                     {"optimizer_steps", state.optimizer.steps},
                     {"run", identity_json(state.identity)}}}};
  // The objective's metrics (dpo, orpo) of the steps after the last log line.
  if (!state.metrics.window_metrics.empty()) document["finetune"]["window_metrics"] = state.metrics.window_metrics;
  if (state.loss_scaler) {  // fp16 runs only (HF's scaler.pt)
    document["finetune"]["loss_scale"] = state.loss_scaler->scale;
    document["finetune"]["loss_scale_growth_tracker"] = state.loss_scaler->growth_tracker;
  }
  return document;
}

// Both fields or neither: a bf16 run's checkpoint and older ones have none.
std::optional<LossScalerState> loss_scaler_from(const json& ours, const std::string& where) {
  const bool has_scale = ours.contains("loss_scale");
  if (has_scale != ours.contains("loss_scale_growth_tracker")) {
    throw Error(where + ": 'loss_scale' and 'loss_scale_growth_tracker' come together, one is missing");
  }
  if (!has_scale) return std::nullopt;
  LossScalerState state{field<double>(ours, "loss_scale", where), field<int64_t>(ours, "loss_scale_growth_tracker", where)};
  if (!(state.scale > 0) || state.growth_tracker < 0) {
    throw Error(where + ": loss_scale must be positive and loss_scale_growth_tracker >= 0");
  }
  return state;
}

json read_trainer_state(const std::string& dir) {
  if (!is_complete_checkpoint(dir)) {
    throw UsageError("--resume_from_checkpoint: " + dir + " is not a complete finetune checkpoint (it needs " +
                     kOptimizerFile + ", " + kRngFile + " and " + kTrainerStateFile + " beside the adapter)");
  }
  return read_json_file(dir + "/" + kTrainerStateFile);
}

// The state optimizer.safetensors holds for each trainable tensor ("<field>/<tensor name>"), in
// the layout of `optimizer` (Note [Optimizer state layout]); nothing missing, nothing extra.
std::vector<ParameterState> read_optimizer_tensors(const std::string& path, const std::string& optimizer,
                                                   const NamedTensors& trainable) {
  const auto file = SafetensorsFile::open(path);
  const auto written_by = file.metadata().find("optimizer");
  // Absent in files written before --optim had a choice: torch's AdamW wrote them.
  const std::string kind = written_by == file.metadata().end() ? "adamw_torch" : written_by->second;
  if (kind != optimizer) {
    throw Error(path + ": holds the state of " + kind + ", but its trainer_state.json names --optim " + optimizer);
  }
  std::vector<ParameterState> out;
  std::set<std::string> used;
  for (const auto& [name, parameter] : trainable) {
    std::vector<StateTensorSpec> layout;
    try {
      layout = optimizer_state_layout(kind, parameter);
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
    ParameterState tensors;
    for (const auto& spec : layout) {
      const std::string key = spec.field + "/" + name;
      const TensorInfo* info = file.find(key);
      if (info == nullptr) throw Error(path + ": missing tensor '" + key + "'");
      auto tensor = tensor_view(file, *info).clone();
      if (tensor.sizes().vec() != spec.shape || tensor.scalar_type() != spec.dtype) {
        throw Error(path + ": tensor '" + key + "' is " + c10::toString(tensor.scalar_type()) + " " +
                    shape_to_string(tensor.sizes().vec()) + ", " + kind + " keeps " + c10::toString(spec.dtype) + " " +
                    shape_to_string(spec.shape) + " for the adapter's " + shape_to_string(parameter.sizes().vec()));
      }
      tensors.emplace_back(spec.field, std::move(tensor));
      used.insert(key);
    }
    out.push_back(std::move(tensors));
  }
  for (const auto& info : file.tensors()) {
    if (!used.count(info.name)) throw Error(path + ": unexpected tensor '" + info.name + "'");
  }
  return out;
}

const json& finetune_section(const json& document, const std::string& path) {
  if (!document.is_object() || !document.contains("finetune")) throw Error(path + ": missing field 'finetune'");
  return document.at("finetune");
}

const char* flag_text(bool value) { return value ? "true" : "false"; }

std::string data_description(const DataIdentity& data) {
  return data.dataset + " (" + std::to_string(data.samples) + " tokenized samples, fingerprint " +
         data.samples_fingerprint + ")";
}

// Note [Resume identity]: the settings that decide which samples a saved data position points
// at, then the tokenized samples themselves. `differs` throws the UsageError.
template <typename Differs>
void check_data_compatible(const DataIdentity& saved, const DataIdentity& current, const Differs& differs) {
  if (saved.max_seq_length != current.max_seq_length) {
    differs("--max_seq_length", std::to_string(saved.max_seq_length), std::to_string(current.max_seq_length));
  }
  if (saved.packing != current.packing) differs("--packing", flag_text(saved.packing), flag_text(current.packing));
  if (saved.group_by_length != current.group_by_length) {
    differs("--group_by_length", flag_text(saved.group_by_length), flag_text(current.group_by_length));
  }
  if (saved.shuffle != current.shuffle) differs("--shuffle", flag_text(saved.shuffle), flag_text(current.shuffle));
  if (saved.samples != current.samples || saved.samples_fingerprint != current.samples_fingerprint) {
    differs("the training data (--dataset)", data_description(saved), data_description(current));
  }
}

}  // namespace

RunIdentity read_run_identity(const std::string& dir) {
  const std::string path = dir + "/" + kTrainerStateFile;
  const json document = read_trainer_state(dir);
  const auto& ours = finetune_section(document, path);
  if (!ours.contains("run")) throw Error(path + " (finetune): missing field 'run'");
  return identity_from(ours.at("run"), path + " (finetune).run");
}

std::string checkpoint_path(const std::string& output_dir, int64_t step) {
  return output_dir + "/" + kCheckpointPrefix + std::to_string(step);
}

void write_checkpoint(const std::string& dir, const CausalLM& model, const LoraConfig& lora,
                      const TrainingState& state, bool model_only) {
  AtomicDirectory staged(dir);
  save_adapter(model, lora, state.identity.base_model, staged.path());
  if (model_only) {
    write_file_atomically(staged.path() + "/" + kTrainerStateFile, trainer_state_json(state).dump(1) + "\n");
    staged.commit();
    return;
  }
  const auto trainable = lora_parameters(model);
  const auto& optimizer = state.optimizer;
  if (optimizer.parameters.size() != trainable.size()) {
    throw Error(dir + ": optimizer state holds " + std::to_string(optimizer.parameters.size()) +
                " parameters' state for " + std::to_string(trainable.size()) + " trainable tensors");
  }
  if (optimizer.optimizer != state.identity.optim) {
    throw Error(dir + ": optimizer state of " + optimizer.optimizer + " in a run with --optim " + state.identity.optim);
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (size_t i = 0; i < trainable.size(); ++i) {
    for (const auto& [field, tensor] : optimizer.parameters[i]) tensors.emplace_back(field + "/" + trainable[i].first, tensor);
  }
  save_tensors(staged.path() + "/" + kOptimizerFile, tensors,
               {{"step", std::to_string(optimizer.steps)}, {"optimizer", optimizer.optimizer}});
  std::vector<std::pair<std::string, at::Tensor>> rng;
  for (size_t rank = 0; rank < state.generators.size(); ++rank) {
    rng.emplace_back("rank" + std::to_string(rank) + "/cpu", state.generators[rank].cpu);
    rng.emplace_back("rank" + std::to_string(rank) + "/device", state.generators[rank].device);
  }
  save_tensors(staged.path() + "/" + kRngFile, rng, {{"world_size", std::to_string(state.generators.size())}});
  write_file_atomically(staged.path() + "/" + kTrainerStateFile, trainer_state_json(state).dump(1) + "\n");
  staged.commit();
}

TrainingState read_training_state(const std::string& dir, const NamedTensors& trainable) {
  TrainingState state;
  state.source_dir = dir;
  const std::string state_path = dir + "/" + kTrainerStateFile;
  const json document = read_trainer_state(dir);
  state.global_step = field<int64_t>(document, "global_step", state_path);
  state.total_steps = field<int64_t>(document, "max_steps", state_path);
  if (!document.contains("log_history") || !document.at("log_history").is_array()) {
    throw Error(state_path + ": missing field 'log_history'");
  }
  for (const auto& line : document.at("log_history")) state.metrics.log_history.push_back(line);
  const auto& ours = finetune_section(document, state_path);
  const std::string ours_where = state_path + " (finetune)";
  state.position.epoch = field<int64_t>(ours, "epoch_index", ours_where);
  state.position.steps_into_epoch = field<int64_t>(ours, "steps_into_epoch", ours_where);
  state.metrics.tokens = field<int64_t>(ours, "tokens", ours_where);
  state.metrics.step_losses = field<std::vector<double>>(ours, "step_losses", ours_where);
  if (ours.contains("window_metrics")) {
    state.metrics.window_metrics = field<std::vector<std::vector<double>>>(ours, "window_metrics", ours_where);
  }
  state.optimizer.steps = field<int64_t>(ours, "optimizer_steps", ours_where);
  state.loss_scaler = loss_scaler_from(ours, ours_where);
  if (document.contains("best_model_checkpoint") && document.at("best_model_checkpoint").is_string()) {
    state.best_model_checkpoint = document.at("best_model_checkpoint").get<std::string>();
  }
  if (document.contains("best_metric") && document.at("best_metric").is_number()) {
    state.best_metric = document.at("best_metric").get<double>();
  }
  if (!ours.contains("run")) throw Error(ours_where + ": missing field 'run'");
  state.identity = identity_from(ours.at("run"), ours_where + ".run");
  if (state.global_step < 0 || state.position.epoch < 0 || state.position.steps_into_epoch < 0 ||
      state.optimizer.steps < 0 || static_cast<int64_t>(state.metrics.step_losses.size()) != state.global_step) {
    throw Error(state_path + ": inconsistent state (global_step " + std::to_string(state.global_step) + ", " +
                std::to_string(state.metrics.step_losses.size()) + " step losses)");
  }

  state.optimizer.optimizer = state.identity.optim;
  state.optimizer.parameters = read_optimizer_tensors(dir + "/" + kOptimizerFile, state.identity.optim, trainable);

  const std::string rng_path = dir + "/" + kRngFile;
  const auto rng = load_tensors(rng_path);
  for (int64_t rank = 0;; ++rank) {
    const auto cpu = rng.find("rank" + std::to_string(rank) + "/cpu");
    const auto device = rng.find("rank" + std::to_string(rank) + "/device");
    if (cpu == rng.end() || device == rng.end()) break;
    state.generators.push_back({cpu->second, device->second});
  }
  if (static_cast<int64_t>(state.generators.size()) != state.identity.world_size) {
    throw Error(rng_path + ": holds the generator states of " + std::to_string(state.generators.size()) +
                " ranks, the run had " + std::to_string(state.identity.world_size));
  }
  return state;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code error;
  for (fs::directory_iterator it(output_dir, error), end; !error && it != end; it.increment(error)) {
    const auto step = checkpoint_step(it->path().filename().string());
    if (step && is_model_checkpoint(it->path().string())) out.emplace_back(*step, it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> prune_checkpoints(const std::string& output_dir, int64_t keep, const std::string& best) {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  auto checkpoints = list_checkpoints(output_dir);
  // HF's _sorted_checkpoints: the best checkpoint moves to the second newest place (so it is
  // kept), and a limit of 1 keeps 2 while the best is not the newest.
  const auto best_at = std::find_if(checkpoints.begin(), checkpoints.end(), [&](const auto& checkpoint) {
    return !best.empty() && fs::path(checkpoint.second).lexically_normal() == fs::path(best).lexically_normal();
  });
  if (best_at != checkpoints.end() && best_at + 1 != checkpoints.end()) {
    const auto kept_best = *best_at;
    checkpoints.erase(best_at);
    checkpoints.insert(checkpoints.end() - 1, kept_best);
    keep = std::max<int64_t>(keep, 2);
  }
  for (size_t i = 0; i + static_cast<size_t>(keep) < checkpoints.size(); ++i) {
    remove_atomically(checkpoints[i].second);  // never a half-deleted checkpoint-N
    removed.push_back(checkpoints[i].second);
  }
  return removed;
}

std::string resolve_resume_checkpoint(const std::string& option, const std::string& output_dir) {
  if (option == "true") {
    const auto checkpoints = list_checkpoints(output_dir);
    if (checkpoints.empty()) {
      throw UsageError("--resume_from_checkpoint true: no complete checkpoint-N directory in " + output_dir);
    }
    const std::string& newest = checkpoints.back().second;
    if (!is_complete_checkpoint(newest)) {
      throw UsageError("--resume_from_checkpoint true: the newest checkpoint, " + newest +
                       ", holds no optimizer and generator state (written with --save_only_model): training "
                       "cannot resume from it");
    }
    return newest;
  }
  if (!is_complete_checkpoint(option)) {
    throw UsageError("--resume_from_checkpoint: " + option + " is not a complete finetune checkpoint directory");
  }
  return option;
}

std::vector<std::string> check_resume_compatible(const RunIdentity& saved, const RunIdentity& current) {
  auto differs = [](const std::string& what, const std::string& saved_value, const std::string& current_value) {
    throw UsageError("--resume_from_checkpoint: the checkpoint was written with " + what + " " + saved_value +
                     ", this run has " + current_value + " (they must match to resume)");
  };
  if (saved.base_model != current.base_model) differs("--model_name", saved.base_model, current.base_model);
  for (const char* key : {"r", "lora_alpha", "use_rslora", "use_dora", "target_modules", "target_parameters", "lora_dropout", "bias", "peft_type"}) {
    const auto saved_value = saved.adapter_config.value(key, json());
    const auto current_value = current.adapter_config.value(key, json());
    if (saved_value != current_value) differs(std::string("adapter ") + key, saved_value.dump(), current_value.dump());
  }
  if (saved.global_batch() != current.global_batch()) {
    differs("a global batch (world size x per-device batch x accumulation) of",
            std::to_string(saved.global_batch()) + " (" + std::to_string(saved.world_size) + " x " +
                std::to_string(saved.per_device_train_batch_size) + " x " +
                std::to_string(saved.gradient_accumulation_steps) + ")",
            std::to_string(current.global_batch()) + " (" + std::to_string(current.world_size) + " x " +
                std::to_string(current.per_device_train_batch_size) + " x " +
                std::to_string(current.gradient_accumulation_steps) + ")");
  }
  if (saved.seed != current.seed) differs("--seed", std::to_string(saved.seed), std::to_string(current.seed));
  if (saved.optim != current.optim) {
    throw UsageError(std::string("--resume_from_checkpoint: the checkpoint's ") + kOptimizerFile + " holds the state of --optim " +
                     saved.optim + ", this run has --optim " + current.optim + " (resume with --optim " + saved.optim + ")");
  }
  std::vector<std::string> notices;
  if (saved.data && current.data) {
    check_data_compatible(*saved.data, *current.data, differs);
  } else if (current.data) {
    notices.push_back("the checkpoint predates the recording of the training data and its order (--dataset, "
                      "--max_seq_length, --packing, --group_by_length, --shuffle): resuming without checking them");
  }
  if (saved.world_size != current.world_size || saved.per_device_train_batch_size != current.per_device_train_batch_size) {
    notices.push_back("resuming on " + std::to_string(current.world_size) + " rank(s) x batch " +
                      std::to_string(current.per_device_train_batch_size) + " from a checkpoint of " +
                      std::to_string(saved.world_size) + " x " + std::to_string(saved.per_device_train_batch_size) +
                      ": same global batch, so the optimizer and schedule continue exactly, but the samples each step "
                      "sees differ from the original run's");
  }
  return notices;
}

}  // namespace finetune
