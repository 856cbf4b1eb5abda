// Everything a run needs to continue exactly where a checkpoint was taken, besides the adapter:
// assembled from the trainer's components (each keeps its own state: the optimizer, the loss
// scaler, the data position, the generators, the metrics window) and written / read by
// checkpoint/run_checkpoint.h. Plain data; train/ knows nothing of how it is stored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/data/micro_batch_stream.h"
#include "finetune/data/sample.h"
#include "finetune/train/log_window.h"
#include "finetune/train/loss_scaler.h"
#include "finetune/train/optimizer.h"
#include "finetune/train/rng_state.h"

namespace finetune {

// Where in the data the next optimizer step starts: the data stream's own state (its epoch and
// the optimizer steps already taken in it).
using DataPosition = MicroBatchStreamState;

// What decides which samples a data position points at (Note [Resume identity] in
// checkpoint/run_checkpoint.h): the training samples and how they are ordered and batched.
struct DataIdentity {
  std::string dataset;             // --dataset (or --raw_text_file) as given: for messages
  int64_t samples = 0;             // tokenized training samples
  std::string samples_fingerprint; // 16 hex digits over every sample's tokens and labels
  int64_t max_seq_length = 0;
  bool packing = false;
  bool group_by_length = false;
  bool shuffle = true;
};

// `dataset`: the source as the user named it; the stream settings from `stream`.
DataIdentity data_identity(const std::string& dataset, const std::vector<Sample>& samples,
                           const MicroBatchStreamConfig& stream);

// A 64-bit FNV-1a-style hash over the sample count, each sample's length, token ids and labels, as
// 16 hex digits: equal for the same tokenized data, and (not a cryptographic hash) different for
// any accidental change in it. One pass, one multiply per token.
std::string samples_fingerprint(const std::vector<Sample>& samples);

// The settings a resumed run must share with the run that wrote the checkpoint.
struct RunIdentity {
  std::string base_model;          // --model_name
  nlohmann::json adapter_config;   // adapter_config.json's content
  int64_t world_size = 1;
  int64_t per_device_train_batch_size = 1;
  int64_t gradient_accumulation_steps = 1;
  int64_t seed = 0;
  std::string optim = "adamw_torch";  // --optim: which optimizer's state the checkpoint holds
  // Absent in checkpoints written before it was recorded (then not compared, with a warning).
  std::optional<DataIdentity> data;
  int64_t global_batch() const { return world_size * per_device_train_batch_size * gradient_accumulation_steps; }
};

struct TrainingState {
  int64_t global_step = 0;        // optimizer steps completed
  int64_t total_steps = 0;        // of the run that wrote it
  DataPosition position;          // the data stream's
  MetricsState metrics;           // the log window's: tokens, step losses, log history
  // The optimizer's state per trainable tensor (trainable order) and its step count.
  OptimizerState optimizer;
  // Per rank (index = rank): the CPU generator's and the model device's generator state (the CPU
  // one again on a CPU run): LoRA dropout draws from them.
  std::vector<GeneratorStates> generators;
  // An fp16 run's dynamic loss scale and growth tracker (train/loss_scaler.h; trainer_state.json's
  // "loss_scale" and "loss_scale_growth_tracker"). Absent for bf16 and fp32 runs and in older
  // checkpoints: a resumed fp16 run then starts at the initial scale, as HF without scaler.pt.
  std::optional<LossScalerState> loss_scaler;
  // HF's trainer_state.json best_metric and best_model_checkpoint (train/checkpoint_policy.h);
  // unset / "" before any evaluation (or checkpoint of the best one).
  std::optional<double> best_metric;
  std::string best_model_checkpoint;
  RunIdentity identity;
  std::string source_dir;  // the checkpoint it was read from ("" when captured by the trainer)
};

}  // namespace finetune
