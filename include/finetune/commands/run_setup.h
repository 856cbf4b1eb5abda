// Stages shared by `train` and `eval`, each from its own small config (stage_configs.h): the
// model with its weights and tokenizer, the adapter (fresh or loaded), and the tokenized datasets.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "finetune/commands/stage_configs.h"
#include "finetune/data/dataset.h"
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
};

LoadedModel load_model(const ModelSource& source, const EnvMap& env, const at::Device& device);

struct AttachedAdapter {
  LoraConfig config;       // what is saved as adapter_config.json
  NamedTensors trainable;  // PEFT names
};

// A fresh LoRA from setup.lora, or --init_adapter's adapter_config.json (whose r/alpha/targets then
// win; dropout still comes from the options), attached and initialised (or loaded).
AttachedAdapter setup_adapter(CausalLM& model, const AdapterSetup& setup);

struct Datasets {
  TokenizedDataset train;
  std::optional<TokenizedDataset> eval;
  std::unique_ptr<ChatTemplate> chat_template;  // null when none is used or available
  std::string chat_template_description;        // for the banner
};

// setup.datasets mixed by their weights, or setup.raw_text_file's chunks (+ eval_dataset, or
// eval_split held out of the training rows with setup.seed); token ids are checked against the
// model's vocab_size.
Datasets load_datasets(const DataSetup& setup, const EnvMap& env, const Tokenizer* tokenizer, int64_t vocab_size);
TokenizedDataset load_one_dataset(const std::string& spec, const DataSetup& setup, const EnvMap& env,
                                  const Tokenizer* tokenizer, const ChatTemplate* chat_template, int64_t vocab_size);

// Padding id: the tokenizer's pad token, else its EOS, else config.json's pad_token_id, else 0.
int64_t pad_token_id_for(const CausalLM& model, const Tokenizer* tokenizer);

}  // namespace finetune
