// What `finetune dpo` and `finetune orpo` add to the training command's stages
// (commands/train_command.cpp runs all three): the preference rows as pairs, the stream that
// keeps each pair in one micro-batch, and the objective with its reference.
#pragma once

#include <memory>
#include <string>

#include "finetune/commands/run_setup.h"
#include "finetune/config/options.h"
#include "finetune/data/micro_batch_stream.h"
#include "finetune/data/preference_dataset.h"
#include "finetune/lora/lora_config.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/dpo_objective.h"
#include "finetune/train/objective.h"
#include "finetune/train/reference_adapters.h"

namespace finetune {

// TRL's preparation of `action`'s rows (dpo: DPOTrainer's, orpo: ORPOTrainer's) from the options:
// --max_length (= --max_seq_length), --truncation_mode, --skip_bad_rows.
PreferenceDatasetOptions preference_dataset_options_from(const Options& options, Action action);

// The training splits' preference rows as pairs, laid out for the stream (interleaved_pair_rows:
// pair i at rows 2i, 2i + 1), in file order across the splits; no evaluation data.
Datasets load_preference_datasets(const DataSplits& splits, const DataSetup& setup, const Tokenizer* tokenizer,
                                  PreferenceDatasetOptions options);

// A pair per unit (group_size 2). ORPO's NLL is a token mean over a micro-batch, so unless
// --step_planning is given, orpo forms micro-batches as TRL does (literal); dpo's loss is a mean
// over pairs whatever the micro-batches, so it keeps the balanced default.
void use_pair_units(MicroBatchStreamConfig& config, const Options& options, Action action);

// A frozen copy of the adapter in `adapter_dir` (config: its adapter_config.json), as TRL's PEFT
// reference with ref_adapter_name: attached and loaded beside the model's own adapters, which are
// left as they were.
// `cache_operands`: --lora_operand_cache, for the copy as for the trained adapters (set_lora_operand_cache).
ReferenceAdapters frozen_adapter_copy(CausalLM& model, const LoraConfig& config, const std::string& adapter_dir,
                                      bool cache_operands = true);

// The objective a training command trains (train: CausalLmObjective) and what it keeps alive.
struct TrainingObjective {
  std::unique_ptr<ReferenceAdapters> reference;  // dpo only
  std::unique_ptr<Objective> objective;
  DpoObjective* dpo = nullptr;  // `objective` as DPO's (dpo only): --precompute_ref_log_probs
  std::string description;  // for the log: "dpo (sigmoid, beta 0.1), reference: the base model"
};
// `adapter_config` and `init_adapter`: the run's adapter and the directory it started from ("" for a
// fresh one): dpo's reference is a frozen copy of that adapter when there is one, else the base model.
TrainingObjective training_objective_for(Action action, const Options& options, CausalLM& model,
                                         const LoraConfig& adapter_config, const std::string& init_adapter);

// --precompute_ref_log_probs: the reference's log-probs of every pair, once, before training.
void precompute_reference_if_asked(TrainingObjective& objective, const Options& options, const Datasets& data,
                                   int64_t pad_token_id, const CausalLM& model, int64_t rank);

}  // namespace finetune
