// The preference commands' stages (see preference_setup.h).
#include "finetune/commands/preference_setup.h"

#include <chrono>
#include <map>
#include <utility>

#include "finetune/checkpoint/adapter_io.h"
#include "finetune/data/step_planner.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/train/dpo_objective.h"
#include "finetune/train/orpo_objective.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// Every projection's adapter taken out of `model`, by projection name.
std::map<std::string, std::unique_ptr<LinearAdapter>> take_adapters(CausalLM& model) {
  std::map<std::string, std::unique_ptr<LinearAdapter>> taken;
  for (auto& [name, linear] : model.named_linears()) {
    if (linear->adapter) taken.emplace(name, std::move(linear->adapter));
  }
  return taken;
}

void put_back_adapters(CausalLM& model, std::map<std::string, std::unique_ptr<LinearAdapter>>& adapters) {
  for (auto& [name, linear] : model.named_linears()) {
    const auto it = adapters.find(name);
    linear->adapter = it == adapters.end() ? nullptr : std::move(it->second);
  }
}

}  // namespace

PreferenceDatasetOptions preference_dataset_options_from(const Options& options, Action action) {
  PreferenceDatasetOptions out;
  out.kind = action == Action::Orpo ? PreferenceRowsKind::Orpo : PreferenceRowsKind::Dpo;
  out.truncation.max_length = options.max_seq_length;
  out.truncation.mode = truncation_mode_from_name(options.truncation_mode);
  out.orpo_max_length = options.max_seq_length;
  out.skip_bad_rows = options.skip_bad_rows;
  return out;
}

Datasets load_preference_datasets(const DataSplits& splits, const DataSetup& setup, const Tokenizer* tokenizer,
                                  PreferenceDatasetOptions options) {
  if (tokenizer == nullptr) throw Error("preference rows are text: the model directory needs its tokenizer");
  Datasets datasets;
  std::string unavailable_reason;
  datasets.chat_template = chat_template_for(setup, tokenizer, unavailable_reason);
  datasets.chat_template_description =
      datasets.chat_template ? datasets.chat_template->description() : "none (" + unavailable_reason + ")";
  options.chat_template = datasets.chat_template.get();
  std::vector<PreferencePair> pairs;
  for (const DatasetSplit& split : splits.train) {
    log::info("data " + split.describe());
    PreferenceDataset part = load_preference_dataset(split.files, *tokenizer, options);
    datasets.train.stats.add(part.stats);
    for (auto& pair : part.pairs) pairs.push_back(std::move(pair));
  }
  for (size_t i = 0; i < pairs.size(); ++i) pairs[i].group_id = static_cast<int64_t>(i);
  const int64_t dropped = datasets.train.stats.rows_no_trainable;
  log::info(std::to_string(pairs.size()) + " preference pairs" +
            (dropped > 0 ? " (" + std::to_string(dropped) + " dropped: the prompt alone fills --max_length with "
                                                               "--truncation_mode keep_start, as TRL drops them)"
                         : std::string()));
  datasets.train.samples = interleaved_pair_rows(pairs);
  return datasets;
}

void use_pair_units(MicroBatchStreamConfig& config, const Options& options, Action action) {
  config.group_size = 2;
  if (action == Action::Orpo && options.given.count("step_planning") == 0) config.planning = StepPlanning::literal;
}

ReferenceAdapters frozen_adapter_copy(CausalLM& model, const LoraConfig& config, const std::string& adapter_dir,
                                      bool cache_operands) {
  auto trained = take_adapters(model);
  std::map<std::string, std::unique_ptr<LinearAdapter>> copy;
  try {
    attach_lora(model, config, /*random_state=*/0);  // every tensor is then loaded from adapter_dir
    load_adapter_weights(model, adapter_dir);
    set_lora_operand_cache(model, cache_operands);
    copy = take_adapters(model);
  } catch (...) {
    put_back_adapters(model, trained);
    throw;
  }
  put_back_adapters(model, trained);
  return ReferenceAdapters(std::move(copy));
}

void precompute_reference_if_asked(TrainingObjective& objective, const Options& options, const Datasets& data,
                                   int64_t pad_token_id, const CausalLM& model, int64_t rank) {
  if (objective.dpo == nullptr || !options.precompute_ref_log_probs) return;
  const auto start = std::chrono::steady_clock::now();
  objective.dpo->precompute_reference(data.train.samples, options.per_device_train_batch_size, pad_token_id,
                                      batch_layout_for(model.kernel_policy()));
  if (rank == 0) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log::info("reference log-probs of " + std::to_string(data.train.samples.size() / 2) + " pairs precomputed in " +
              c10::str(seconds) + " s");
  }
}

TrainingObjective training_objective_for(Action action, const Options& options, CausalLM& model,
                                         const LoraConfig& adapter_config, const std::string& init_adapter) {
  TrainingObjective out;
  if (action == Action::Orpo) {
    out.objective = std::make_unique<OrpoObjective>(options.beta);
    out.description = "orpo (beta " + c10::str(options.beta) + "), reference-free";
    return out;
  }
  if (action != Action::Dpo) {
    const LmHeadLoss tiling = lm_head_loss_from_name(options.lm_head_loss);
    out.objective = std::make_unique<CausalLmObjective>(model.config(), tiling);
    out.description = "causal_lm (LM head loss in " + lm_head_loss_name(tiling) + ")";
    return out;
  }
  DpoLossConfig config;
  config.loss_type = dpo_loss_type_from_name(options.loss_type);
  config.beta = options.beta;
  config.label_smoothing = options.label_smoothing;
  out.reference = std::make_unique<ReferenceAdapters>(
      init_adapter.empty() ? ReferenceAdapters() : frozen_adapter_copy(model, adapter_config, init_adapter,
                                                                           options.lora_operand_cache));
  auto dpo = std::make_unique<DpoObjective>(config, model, *out.reference);
  out.dpo = dpo.get();
  out.objective = std::move(dpo);
  out.description = "dpo (" + options.loss_type + ", beta " + c10::str(options.beta) + "), reference: " +
                    (init_adapter.empty() ? std::string("the base model (adapters off)")
                                          : "a frozen copy of " + init_adapter);
  return out;
}

}  // namespace finetune
