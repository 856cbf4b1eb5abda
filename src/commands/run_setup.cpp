#include "finetune/commands/run_setup.h"

#include <chrono>
#include <filesystem>

#include "finetune/config/hf_hub.h"
#include "finetune/config/model_config.h"
#include "finetune/data/sampler.h"
#include "finetune/checkpoint/adapter_io.h"
#include "finetune/checkpoint/model_weights.h"
#include "finetune/model/device_selection.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {

LoadedModel load_model(const ModelSource& source, const EnvMap& env, const at::Device& device) {
  const auto start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  loaded.model_dir = resolve_model_dir(source.model_name, env);
  auto config = load_model_config(loaded.model_dir);
  loaded.model = std::make_unique<CausalLM>(std::move(config), select_dtype(source.dtype, device), device);
  load_weights(*loaded.model, loaded.model_dir);
  const std::filesystem::path dir(loaded.model_dir);
  if (std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tokenizer.model")) {
    loaded.tokenizer = load_tokenizer(loaded.model_dir);
  }
  loaded.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

AttachedAdapter setup_adapter(CausalLM& model, const AdapterSetup& setup) {
  AttachedAdapter attached;
  attached.config = setup.lora;
  if (!setup.init_adapter.empty()) {
    attached.config = read_adapter_config(setup.init_adapter);
    attached.config.lora_dropout = setup.lora.lora_dropout;
    log::info("starting from adapter " + setup.init_adapter + " (r=" + std::to_string(attached.config.r) + ")");
  }
  attached.trainable = attach_lora(model, attached.config, setup.random_state);
  if (!setup.init_adapter.empty()) load_adapter_weights(model, setup.init_adapter);
  return attached;
}

TokenizedDataset load_one_dataset(const std::string& spec, const DataSetup& setup, const EnvMap& env,
                                  const Tokenizer* tokenizer) {
  DatasetOptions dataset_options;
  dataset_options.max_seq_length = setup.max_seq_length;
  dataset_options.train_on_completions = setup.train_on_completions;
  dataset_options.skip_bad_rows = setup.skip_bad_rows;
  dataset_options.chat_format =
      chat_format_from_name(setup.chat_template, tokenizer ? tokenizer->special_tokens().chat_template : "");
  return load_dataset(resolve_dataset_files(spec, env), tokenizer, dataset_options);
}

Datasets load_datasets(const DataSetup& setup, const EnvMap& env, const Tokenizer* tokenizer) {
  if (setup.dataset.empty()) throw UsageError("--dataset: required for training");
  Datasets datasets;
  datasets.train = load_one_dataset(setup.dataset, setup, env, tokenizer);
  if (!setup.eval_dataset.empty()) {
    datasets.eval = load_one_dataset(setup.eval_dataset, setup, env, tokenizer);
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

int64_t pad_token_id_for(const CausalLM& model, const Tokenizer* tokenizer) {
  if (tokenizer) {
    const auto& special = tokenizer->special_tokens();
    if (special.pad_token_id) return *special.pad_token_id;
    if (special.eos_token_id) return *special.eos_token_id;
  }
  return model.config().pad_token_id.value_or(0);
}

}  // namespace finetune
