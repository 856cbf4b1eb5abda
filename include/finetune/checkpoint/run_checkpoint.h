// A resumable checkpoint, `OUTPUT_DIR/checkpoint-N/`, written whole or not at all
// (util/atomic_directory.h):
//   adapter_config.json, adapter_model.safetensors   the PEFT adapter (peft loads the directory)
//   optimizer.safetensors   the optimizer's state "<field>/<name>" (train/optimizer.h: adamw_torch's
//                           "exp_avg", "exp_avg_sq"; adamw_8bit's "state1", "absmax1", ...);
//                           metadata "step" and "optimizer" (its --optim name)
//   rng_state.safetensors   "rank<R>/cpu", "rank<R>/device": every rank's generator states
//   trainer_state.json      HF Trainer's fields (global_step, epoch, max_steps, log_history, ...)
//                           plus "finetune": the data position, losses, tokens and run identity
//                           (Note [Resume identity])
// `--resume_from_checkpoint true` takes the newest complete one (HF Trainer's meaning).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "finetune/train/training_state.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/lora/lora_config.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

// "checkpoint-<step>" inside `output_dir`.
std::string checkpoint_path(const std::string& output_dir, int64_t step);

// Writes a checkpoint of `model`'s adapter and `state` atomically at `dir`. `model_only`
// (--save_only_model, HF's save_only_model): the adapter and trainer_state.json alone, which
// --save_total_limit counts and --resume_from_checkpoint refuses.
void write_checkpoint(const std::string& dir, const CausalLM& model, const LoraConfig& lora,
                      const TrainingState& state, bool model_only = false);

// The identity of the run that wrote a checkpoint (to compare before reading anything else).
RunIdentity read_run_identity(const std::string& dir);

// Reads a checkpoint's training state (the adapter is loaded with checkpoint/adapter_io.h);
// `trainable` names the tensors whose optimizer state must be there, in the layout of the
// optimizer that wrote it. Errors name the file and field.
TrainingState read_training_state(const std::string& dir, const NamedTensors& trainable);

// The checkpoint-N directories of `output_dir` (complete ones and --save_only_model ones), by
// ascending step.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& output_dir);

// Keeps the newest `keep` checkpoints (keep <= 0: all), and `best` (the best model's checkpoint,
// "" for none) as HF's _rotate_checkpoints does: it counts as the second newest, and a limit of 1
// keeps 2 while it is not the newest. Returns the removed directories.
std::vector<std::string> prune_checkpoints(const std::string& output_dir, int64_t keep, const std::string& best = "");

// The directory --resume_from_checkpoint names: "true" = the newest checkpoint in output_dir
// (UsageError when there is none), otherwise the path itself, which must hold a checkpoint.
std::string resolve_resume_checkpoint(const std::string& option, const std::string& output_dir);

// Note [Resume identity]
// A checkpoint records the settings its state only makes sense with (RunIdentity,
// train/training_state.h): the model, the adapter, the global batch, the seed, the optimizer, and
// what decides which samples its data position points at: --max_seq_length, --packing,
// --group_by_length, --shuffle and the tokenized training samples themselves (count and
// fingerprint, so a changed dataset, split, chat template or tokenizer is caught whatever its
// path). check_resume_compatible throws a UsageError (exit 2) naming the first setting that
// differs and both values. It returns notices to log: when only the world size differs (same
// global batch: the data order then differs), and when the checkpoint predates the data fields
// (written by an older version: accepted unchecked).
std::vector<std::string> check_resume_compatible(const RunIdentity& saved, const RunIdentity& current);

}  // namespace finetune
