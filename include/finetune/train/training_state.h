// Everything a run needs to continue exactly where a checkpoint was taken, besides the adapter:
// plain data filled by the trainer and written / read by run_checkpoint.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "finetune/train/loss_scaler.h"
#include "finetune/train/optimizer.h"

namespace finetune {

// Where in the data the next optimizer step starts: the epoch and the optimizer steps already
// taken in it (portable across world sizes with the same global batch).
struct DataPosition {
  int64_t epoch = 0;
  int64_t steps_into_epoch = 0;
};

// The settings a resumed run must share with the run that wrote the checkpoint.
struct RunIdentity {
  std::string base_model;          // --model_name
  nlohmann::json adapter_config;   // adapter_config.json's content
  int64_t world_size = 1;
  int64_t per_device_train_batch_size = 1;
  int64_t gradient_accumulation_steps = 1;
  int64_t seed = 0;
  std::string optim = "adamw_torch";  // --optim: which optimizer's state the checkpoint holds
  int64_t global_batch() const { return world_size * per_device_train_batch_size * gradient_accumulation_steps; }
};

struct TrainingState {
  int64_t global_step = 0;        // optimizer steps completed
  int64_t total_steps = 0;        // of the run that wrote it
  DataPosition position;
  int64_t tokens = 0;             // non-padding tokens processed so far, all ranks
  std::vector<double> step_losses;               // every step's global mean loss so far
  std::vector<nlohmann::json> log_history;       // metrics.jsonl's lines so far
  // The optimizer's state per trainable tensor (trainable order) and its step count.
  OptimizerState optimizer;
  // Per rank (index = rank): the CPU generator's state and the model device's generator state
  // (equal to the CPU one on a CPU run): LoRA dropout draws from them.
  std::vector<at::Tensor> cpu_rng_states, device_rng_states;
  // An fp16 run's dynamic loss scale and growth tracker (train/loss_scaler.h; trainer_state.json's
  // "loss_scale" and "loss_scale_growth_tracker"). Absent for bf16 and fp32 runs and in older
  // checkpoints: a resumed fp16 run then starts at the initial scale, as HF without scaler.pt.
  std::optional<LossScalerState> loss_scaler;
  RunIdentity identity;
  std::string source_dir;  // the checkpoint it was read from ("" when captured by the trainer)
};

}  // namespace finetune
