// Stages shared by `train` and `eval`: the model with its weights and (optional) adapter, the
// tokenizer, and the tokenized datasets, built from the options.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "finetune/config/options.h"
#include "finetune/data/dataset.h"
#include "finetune/lora/lora_model.h"
#include "finetune/model/causal_lm.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

struct LoadedModel {
  std::string model_dir;
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model directory has no tokenizer files
  double load_seconds = 0;
};

LoadedModel load_model(const Options& options, const EnvMap& env, const at::Device& device);

// LoRA from the options, or from --init_adapter's adapter_config.json (whose r/alpha/targets then
// win), attached and initialised (or loaded).
std::pair<LoraConfig, NamedTensors> setup_lora(CausalLM& model, const Options& options);

struct Datasets {
  TokenizedDataset train;
  std::optional<TokenizedDataset> eval;
};

// --dataset (+ --eval_dataset, or --eval_split held out of the training rows with --seed).
Datasets load_datasets(const Options& options, const EnvMap& env, const Tokenizer* tokenizer);
TokenizedDataset load_one_dataset(const std::string& spec, const Options& options, const EnvMap& env,
                                  const Tokenizer* tokenizer);

// Padding id: the tokenizer's pad token, else its EOS, else config.json's pad_token_id, else 0.
int64_t pad_token_id_for(const CausalLM& model, const Tokenizer* tokenizer);

}  // namespace finetune
