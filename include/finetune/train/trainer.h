// The training loop: micro-batches -> forward -> loss -> backward (gradients bucketed and
// all-reduced by the GradReducer as they land) -> clip -> optimizer step -> schedule, with logging,
// periodic evaluation and checkpoints. Runs identically on 1 or N ranks.
//
// Note [Global token normalisation]
// Every rank back-propagates sum(token losses) / N, where N is the number of trainable tokens in
// the whole global accumulated batch (all ranks, all micro-steps; all-reduced once per step before
// the first backward), and gradients are SUMMED across ranks. The update is therefore exactly the
// single-process update on the union of the data, however unevenly tokens fall across ranks or
// micro-batches (not a mean of per-micro-batch means).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "finetune/checkpoint/training_state.h"
#include "finetune/data/micro_batch_stream.h"
#include "finetune/ddp/communicator.h"
#include "finetune/ddp/ddp_defaults.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/lr_schedule.h"
#include "finetune/train/optimizer.h"
#include "finetune/report/metrics.h"

namespace finetune {

struct TrainerConfig {
  int64_t total_steps = 1;
  int64_t logging_steps = 1;
  int64_t save_steps = 0;
  int64_t eval_steps = 0;
  double learning_rate = 2e-4;
  LrSchedule schedule;
  std::string optim = "adamw_torch";  // --optim: an optimizer_names() entry (train/optimizer.h)
  AdamWOptions adamw;
  double max_grad_norm = 1.0;
  bool gradient_checkpointing = true;
  std::string output_dir;
  int64_t ddp_check_consistency_steps = 0;
  int64_t ddp_bucket_cap_mb = kDefaultBucketCapMb;
  bool ddp_find_unused_parameters = false;
  int64_t profile_start_step = 0;  // 0: no profile (step_profiler.h)
  int64_t profile_steps = 3;
  uint64_t seed = 3407;            // seeds the generators LoRA dropout draws from (rng_state.h)
  bool tensorboard = false;        // also log to OUTPUT_DIR/runs/ event files (report/tensorboard_writer.h)
  bool cuda_graphs = true;         // replay small micro-steps from CUDA graphs (train/micro_step_graphs.h)
};

struct TrainerHooks {
  // The global mean eval loss (a collective: every rank calls it); unset when there is no eval data.
  std::function<double()> evaluate;
  // Writes a checkpoint of the adapter and `state` (whose identity the hook fills in) into `dir`;
  // called on rank 0 only, and every rank learns whether it succeeded.
  std::function<void(const std::string& dir, TrainingState state)> save_checkpoint;
};

struct TrainResult {
  std::vector<double> step_losses;  // global mean train loss of every step
  std::optional<double> final_eval_loss;
  double elapsed_s = 0;
  int64_t tokens = 0;
  double tokens_per_second() const { return static_cast<double>(tokens) / (elapsed_s > 0 ? elapsed_s : 1e-9); }
  // The mean of step_losses, HF Trainer's train_loss (_total_loss_scalar / global_step). A resumed
  // run's step_losses start with the checkpoint's, so it reports the mean over all its steps, as
  // the uninterrupted run would; HF instead divides only the resumed session's loss sum by the
  // global step, which understates it.
  double train_loss() const;
  std::string last_checkpoint;  // the newest checkpoint written, or "" (for error messages)
};

// `resume`: continue from a checkpoint's state (parameters already loaded into the model): the
// optimizer, the data position, the generators, the losses and metrics so far.
TrainResult train(CausalLM& model, const NamedTensors& trainable, MicroBatchStream& stream,
                  Communicator& communicator, const TrainerConfig& config, const TrainerHooks& hooks,
                  const TrainingState* resume = nullptr);

}  // namespace finetune
