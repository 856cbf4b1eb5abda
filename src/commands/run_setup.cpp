#include "finetune/commands/run_setup.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <tuple>

#include "finetune/hub/cache_lookup.h"
#include "finetune/io/model_config.h"
#include "finetune/data/dataset_mixture.h"
#include "finetune/data/raw_text.h"
#include "finetune/data/sampler.h"
#include "finetune/checkpoint/adapter_io.h"
#include "finetune/checkpoint/run_directory.h"
#include "finetune/checkpoint/save_methods.h"
#include "finetune/commands/hub_inputs.h"
#include "finetune/launch/launch_env.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/weights/model_weights.h"
#include "finetune/model/device_memory.h"
#include "finetune/model/projection_names.h"
#include "finetune/model/device_selection.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {

LoadedModel load_model(const ModelSource& source, const EnvMap& env, const at::Device& device) {
  const auto start = std::chrono::steady_clock::now();
  reset_peak_device_memory(device);
  LoadedModel loaded;
  loaded.model_dir = resolve_model_dir(source.model_name, env, source.revision);
  auto config = load_model_config(loaded.model_dir);
  const bool projections_4bit = source.load_in_4bit || config.quantization.has_value();
  const KernelRequests kernel_requests{requested_long_row_attention(env_value(env, kLongRowAttentionVariable)),
                                       requested_norm_rope_kernel(env_value(env, kNormRopeKernelVariable))};
  loaded.model = std::make_unique<CausalLM>(std::move(config), select_dtype(source.dtype, device), device,
                                            projections_4bit, kernel_requests);
  load_weights(*loaded.model, loaded.model_dir);
  const std::filesystem::path dir(loaded.model_dir);
  if (std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tokenizer.model")) {
    loaded.tokenizer = load_tokenizer(loaded.model_dir);
    // Every id the tokenizer can produce must index the embedding.
    const int64_t vocab_size = loaded.model->config().vocab_size;
    if (loaded.tokenizer->max_token_id() >= vocab_size) {
      throw Error(loaded.model_dir + ": the tokenizer has token id " + std::to_string(loaded.tokenizer->max_token_id()) +
                  ", outside the model's embedding (vocab_size " + std::to_string(vocab_size) + " in config.json)");
    }
  }
  loaded.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  loaded.load_peak_gib = peak_device_memory_gib(device);
  return loaded;
}

namespace {

std::string last_component(std::string path) {
  while (!path.empty() && path.back() == '/') path.pop_back();
  return path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
}

// An adapter trained on another model must not load silently onto this one (shapes can agree by
// chance): its base model's config.json, when that is a local directory, must describe the same
// architecture and sizes; otherwise a differing name is worth a warning.
void check_adapter_base(const LoraConfig& adapter, const AdapterSetup& setup, const CausalLM& model) {
  const std::string& base = adapter.base_model_name_or_path;
  const std::string& model_name = setup.base_model_name;
  const std::string where = setup.init_adapter + "/adapter_config.json";
  if (base.empty()) return;
  if (std::filesystem::exists(std::filesystem::path(base) / "config.json")) {
    const auto theirs = load_model_config(base);
    const auto& ours = model.config();
    const std::vector<std::tuple<const char*, std::string, std::string>> fields = {
        {"architecture", theirs.architecture, ours.architecture},
        {"hidden_size", std::to_string(theirs.hidden_size), std::to_string(ours.hidden_size)},
        {"num_hidden_layers", std::to_string(theirs.num_hidden_layers), std::to_string(ours.num_hidden_layers)},
        {"intermediate_size", std::to_string(theirs.intermediate_size), std::to_string(ours.intermediate_size)},
        {"num_key_value_heads", std::to_string(theirs.num_key_value_heads), std::to_string(ours.num_key_value_heads)},
        {"vocab_size", std::to_string(theirs.vocab_size), std::to_string(ours.vocab_size)}};
    for (const auto& [field, their_value, our_value] : fields) {
      if (their_value != our_value) {
        throw UsageError(setup.adapter_option + ": " + where + " was trained on " + base + " (" + field + " " + their_value +
                         "), not on this model (" + field + " " + our_value + ")");
      }
    }
    return;
  }
  if (last_component(base) != last_component(model_name)) {
    log::warn(setup.adapter_option + ": " + where + " names " + base + " as its base model, this run loads " + model_name);
  }
}

// A loaded adapter's own config decides its shape: a LoRA option the user set to another value
// would be silently ignored, so it is an error.
// The architecture's projection names this model has (a Qwen3-MoE model without dense layers has
// no gate_proj / up_proj / down_proj), as PEFT's all-linear finds them.
std::vector<std::string> present_lora_target_names(const CausalLM& model) {
  std::vector<std::string> names;
  const auto linears = model.named_linears();
  for (const auto& name : lora_target_names(model.architecture())) {
    for (const auto& [module, linear] : linears) {
      if (module.size() > name.size() && module.compare(module.size() - name.size() - 1, name.size() + 1, "." + name) == 0) {
        names.push_back(name);
        break;
      }
    }
  }
  return names;
}

void check_given_lora_options(const LoraConfig& adapter, const AdapterSetup& setup) {
  const std::string where = setup.init_adapter + "/adapter_config.json";
  for (const auto& option : lora_shape_options()) {
    const auto& given = setup.given_lora_options;
    if (std::find(given.begin(), given.end(), option.name) == given.end()) continue;
    const std::string ours = option.value(setup.lora), theirs = option.value(adapter);
    if (ours != theirs) {
      throw UsageError(std::string("--") + option.name + ": " + ours + " differs from " + theirs + " in " + where +
                       " (" + setup.adapter_option + " decides the adapter's shape; drop --" + option.name +
                       " or start fresh)");
    }
  }
}

}  // namespace

AttachedAdapter setup_adapter(CausalLM& model, const AdapterSetup& setup) {
  AttachedAdapter attached;
  attached.config = setup.lora;
  // The default target list (and all-linear) holds every family's projection names: a fresh
  // adapter takes those of this model (Phi-3 has qkv_proj, not q_proj), as PEFT's all-linear does.
  if (attached.config.target_modules == projection_names()) {
    attached.config.target_modules = present_lora_target_names(model);
  }
  if (!setup.init_adapter.empty()) {
    attached.config = read_adapter_config(setup.init_adapter);
    check_adapter_base(attached.config, setup, model);
    check_given_lora_options(attached.config, setup);
    attached.config.lora_dropout = setup.lora.lora_dropout;
    log::info("starting from adapter " + setup.init_adapter + " (r=" + std::to_string(attached.config.r) + ")");
  }
  attached.trainable = attach_lora(model, attached.config, setup.random_state);
  set_lora_operand_cache(model, setup.lora_operand_cache);
  if (!setup.init_adapter.empty()) load_adapter_weights(model, setup.init_adapter);
  return attached;
}

OpenedModel open_model(const ModelStageSetup& setup, const HubInputs& hub_inputs, const EnvMap& env,
                       const at::Device& device, const FetchHubInputs& fetch, const std::function<void()>& before_load) {
  check_local_model_path(setup.source.model_name);
  fetch(hub_inputs);
  if (before_load) before_load();
  OpenedModel opened;
  opened.loaded = load_model(setup.source, env, device);
  if (setup.needs_tokenizer && !opened.loaded.tokenizer) {
    throw Error(opened.loaded.model_dir + ": no tokenizer.json or tokenizer.model; " + setup.command +
                " needs the model's tokenizer");
  }
  const AdapterSetup& adapter = setup.adapter;
  if (!adapter.init_adapter.empty() && !std::filesystem::is_directory(adapter.init_adapter)) {
    throw UsageError(adapter.adapter_option + ": \"" + adapter.init_adapter + "\" is not a PEFT adapter directory");
  }
  if (setup.fresh_adapter || !adapter.init_adapter.empty()) opened.adapter = setup_adapter(*opened.loaded.model, adapter);
  if (setup.fresh_adapter) {  // train
    check_base_tensors_trainable(*opened.loaded.model, opened.adapter->config, adapter.gradient_checkpointing);
  }
  return opened;
}

at::Device command_device(const ModelSource& source, const EnvMap& env) {
  return select_device(source.device, launch_env_from(env).local_rank);
}

// Rows that need a chat template when none is available fail with unavailable_reason.
std::unique_ptr<ChatTemplate> chat_template_for(const DataSetup& setup, const Tokenizer* tokenizer,
                                                std::string& unavailable_reason) {
  if (tokenizer == nullptr || is_alpaca_choice(setup.chat_template)) {
    unavailable_reason = tokenizer ? "--chat_template alpaca" : "no tokenizer";
    return nullptr;
  }
  const SpecialTokens& special = tokenizer->special_tokens();
  if (setup.chat_template == "auto" && special.chat_templates.count("default") == 0) {
    unavailable_reason = "the tokenizer has no chat template";
    return nullptr;
  }
  try {
    return std::make_unique<ChatTemplate>(
        ChatTemplate::select(setup.chat_template, special.chat_templates, special, setup.chat_template_kwargs));
  } catch (const Error& e) {
    if (setup.chat_template != "auto") throw;
    unavailable_reason = e.what();
    log::warn("the tokenizer's chat template cannot be used: " + unavailable_reason);
    return nullptr;
  }
}

namespace {

DatasetOptions dataset_options_for(const DataSetup& setup, const ChatTemplate* chat_template, int64_t vocab_size) {
  DatasetOptions options;
  options.max_seq_length = setup.max_seq_length;
  options.chat_template = chat_template;
  options.train_on_completions = setup.train_on_completions;
  options.skip_bad_rows = setup.skip_bad_rows;
  options.vocab_size = vocab_size;
  return options;
}

TokenizedDataset load_raw_text(const DataSetup& setup, const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) throw UsageError("--raw_text_file needs the model's tokenizer");
  TokenizedDataset dataset;
  for (Sample& chunk : chunk_raw_text(read_raw_text(setup.raw_text_file), *tokenizer, setup.raw_text)) {
    ++dataset.stats.rows_read;
    add_sample(dataset, std::move(chunk), setup.max_seq_length);
  }
  log::info("raw text " + setup.raw_text_file + ": " + std::to_string(dataset.samples.size()) + " chunks of up to " +
            std::to_string(setup.raw_text.chunk_size) + " tokens (stride " + std::to_string(setup.raw_text.stride) + ")");
  return dataset;
}

TokenizedDataset load_split(const DatasetSplit& split, const DataSetup& setup, const Tokenizer* tokenizer,
                            const ChatTemplate* chat_template, int64_t vocab_size) {
  log::info("data " + split.describe());
  return load_dataset(split.files, tokenizer, dataset_options_for(setup, chat_template, vocab_size));
}

}  // namespace

std::vector<DatasetSplit> eval_command_splits(const DataSetup& setup, const EnvMap& env) {
  const std::string first = setup.datasets.empty() ? std::string() : setup.datasets.front();
  if (!setup.eval_dataset.empty()) return {resolve_eval_dataset(setup.eval_dataset, first, setup.dataset_split, env)};
  if (setup.datasets.empty()) throw UsageError("--dataset (or --eval_dataset): required for eval");
  std::vector<DatasetSplit> splits;
  for (const std::string& dataset : setup.datasets) splits.push_back(resolve_dataset_split(dataset, setup.dataset_split, env));
  return splits;
}

DataSplits resolve_data_splits(const DataSetup& setup, const EnvMap& env) {
  if (setup.datasets.empty() && setup.raw_text_file.empty()) {
    throw UsageError("--dataset (or --raw_text_file): required for training");
  }
  DataSplits splits;
  for (const std::string& dataset : setup.datasets) {
    splits.train.push_back(resolve_dataset_split(dataset, setup.dataset_split, env));
  }
  if (!setup.eval_dataset.empty()) {
    const std::string first = setup.datasets.empty() ? std::string() : setup.datasets.front();
    splits.eval = resolve_eval_dataset(setup.eval_dataset, first, setup.dataset_split, env);
  }
  return splits;
}

Datasets load_datasets(const DataSplits& splits, const DataSetup& setup, const Tokenizer* tokenizer,
                       int64_t vocab_size) {
  Datasets datasets;
  std::string unavailable_reason;
  datasets.chat_template = chat_template_for(setup, tokenizer, unavailable_reason);
  datasets.chat_template_description =
      datasets.chat_template ? datasets.chat_template->description() : "none (" + unavailable_reason + ")";
  const ChatTemplate* chat_template = datasets.chat_template.get();
  if (!setup.raw_text_file.empty()) {
    datasets.train = load_raw_text(setup, tokenizer);
  } else {
    std::vector<TokenizedDataset> parts;
    for (const DatasetSplit& split : splits.train) {
      parts.push_back(load_split(split, setup, tokenizer, chat_template, vocab_size));
    }
    datasets.train = parts.size() == 1 && setup.dataset_weights == std::vector<double>{1.0}
                         ? std::move(parts.front())
                         : mix_datasets(std::move(parts), setup.dataset_weights, setup.seed);
  }
  if (splits.eval) {
    datasets.eval = load_split(*splits.eval, setup, tokenizer, chat_template, vocab_size);
  } else if (setup.eval_split > 0) {
    // Hold out a seeded random subset, like datasets' train_test_split(test_size, seed).
    auto& rows = datasets.train.samples;
    const auto order = epoch_permutation(static_cast<int64_t>(rows.size()), setup.seed, -1);
    const auto held_out = static_cast<size_t>(std::ceil(setup.eval_split * static_cast<double>(rows.size())));
    if (held_out == 0 || held_out >= rows.size()) {
      throw UsageError("--eval_split: " + std::to_string(setup.eval_split) + " leaves no training or no eval rows (" +
                       std::to_string(rows.size()) + " rows)");
    }
    TokenizedDataset eval;
    std::vector<Sample> kept;
    for (size_t i = 0; i < order.size(); ++i) {
      (i < held_out ? eval.samples : kept).push_back(std::move(rows[order[i]]));
    }
    rows = std::move(kept);
    datasets.eval = std::move(eval);
  }
  return datasets;
}

nlohmann::json run_outputs(const std::string& output_dir, const ExportSetup& export_setup,
                           const std::vector<std::string>& gguf_files) {
  nlohmann::json in_output_dir = nlohmann::json::array();
  for (const auto& name : run_artifacts(output_dir)) in_output_dir.push_back((std::filesystem::path(output_dir) / name).string());
  const bool model_directory = export_setup.save_model &&
                               export_setup.export_config.save_method != SaveMethod::Gguf;
  return {{"output_dir", in_output_dir},
          {"save_path", model_directory ? nlohmann::json(export_setup.export_config.save_path) : nlohmann::json()},
          {"gguf_files", gguf_files}};
}

int64_t pad_token_id_for(const CausalLM& model, const Tokenizer* tokenizer) {
  if (tokenizer) {
    const auto& special = tokenizer->special_tokens();
    if (special.pad_token_id) return *special.pad_token_id;
    if (special.eos_token_id) return *special.eos_token_id;
  }
  return model.config().pad_token_id.value_or(0);
}

}  // namespace finetune
