// Stages shared by the commands, each from its own small config (stage_configs.h): the model with
// its weights, tokenizer and adapter (one sequence for every command: open_model), and the
// tokenized datasets.
#pragma once

#include <functional>
#include <memory>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "finetune/commands/stage_configs.h"
#include "finetune/data/dataset_source.h"
#include "finetune/data/dataset.h"
#include "finetune/hub/hub_fetch.h"
#include "finetune/launch/environment.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

struct LoadedModel {
  std::string model_dir;
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model directory has no tokenizer files
  double load_seconds = 0;
  std::optional<double> load_peak_gib;  // device memory at peak while loading (nullopt on the CPU)
};

LoadedModel load_model(const ModelSource& source, const EnvMap& env, const at::Device& device);

struct AttachedAdapter {
  LoraConfig config;       // what is saved as adapter_config.json
  NamedTensors trainable;  // PEFT names
};

// A fresh LoRA from setup.lora, or --init_adapter's adapter_config.json (whose r/alpha/targets then
// win; dropout still comes from the options), attached and initialised (or loaded).
AttachedAdapter setup_adapter(CausalLM& model, const AdapterSetup& setup);

struct OpenedModel {
  LoadedModel loaded;
  std::optional<AttachedAdapter> adapter;  // none without an adapter to load (or fresh_adapter)
};

// The hub stage of a command: fetches hub ids into the cache (hub_inputs.h: at once, or once per
// node under DDP).
using FetchHubInputs = std::function<void(const HubInputs&)>;

// The sequence every command starts with: hub inputs into the cache (fetch), the caller's cheap
// checks (before_load: a wrong split or an unusable output directory fails before a model loads),
// the model with weights and tokenizer on `device`, then its adapter: loaded (train's
// --init_adapter, the others' --adapter), fresh (train), or none.
OpenedModel open_model(const ModelStageSetup& setup, const HubInputs& hub_inputs, const EnvMap& env,
                       const at::Device& device, const FetchHubInputs& fetch,
                       const std::function<void()>& before_load = {});

// The device of a single-process command (eval, generate, chat, export): --device, with
// LOCAL_RANK choosing the GPU under a launcher.
at::Device command_device(const ModelSource& source, const EnvMap& env);

struct Datasets {
  TokenizedDataset train;
  std::optional<TokenizedDataset> eval;
  std::unique_ptr<ChatTemplate> chat_template;  // null when none is used or available
  std::string chat_template_description;        // for the banner
};

// The files training reads: the split setup.dataset_split of each of setup.datasets (none with
// setup.raw_text_file), and setup.eval_dataset (a path, hub id or split name of the first dataset:
// data/dataset_source.h) when given. Cheap (file names only), so commands resolve them before
// loading the model and a wrong split fails at once.
struct DataSplits {
  std::vector<DatasetSplit> train;
  std::optional<DatasetSplit> eval;
};
DataSplits resolve_data_splits(const DataSetup& setup, const EnvMap& env);

// Their rows, tokenized: the training splits mixed by setup.dataset_weights, or
// setup.raw_text_file's chunks; without an eval split, setup.eval_split's fraction of the training
// rows is held out with setup.seed. Token ids are checked against the model's vocab_size.
Datasets load_datasets(const DataSplits& splits, const DataSetup& setup, const Tokenizer* tokenizer,
                       int64_t vocab_size);

// The chat template for conversational rows: setup.chat_template's choice, or null when the choice
// is "auto" and the tokenizer has none or it cannot be run (`unavailable_reason` then says why).
std::unique_ptr<ChatTemplate> chat_template_for(const DataSetup& setup, const Tokenizer* tokenizer,
                                                std::string& unavailable_reason);

// `finetune eval`: setup.eval_dataset when given, else the split setup.dataset_split of each dataset.
std::vector<DatasetSplit> eval_command_splits(const DataSetup& setup, const EnvMap& env);

// Every file and directory a training run wrote, for its summary line: {"output_dir": [the run's
// files there: adapter, metrics, checkpoints ...], "save_path": --save_model's directory or null,
// "gguf_files": [...]}.
nlohmann::json run_outputs(const std::string& output_dir, const ExportSetup& export_setup,
                           const std::vector<std::string>& gguf_files);

// Padding id: the tokenizer's pad token, else its EOS, else config.json's pad_token_id, else 0.
int64_t pad_token_id_for(const CausalLM& model, const Tokenizer* tokenizer);

}  // namespace finetune
