// The training loop, read as torchtitan's train.py: train() -> train_step() -> forward_backward()
// of each micro-batch (the objective's forward and loss, backward with gradients bucketed and
// all-reduced by the GradReducer as they land), then clip -> optimizer step -> schedule, with
// logging, periodic evaluation and checkpoints. Runs identically on 1 or N ranks. The Trainer owns
// the reducer, the optimizer, the fp16 loss scaler, the generators and the log window; each keeps
// its own state, and state() / load_state() assemble the resumable TrainingState from them.
//
// Note [Global token normalisation]
// Every rank back-propagates sum(token losses) / N, where N is the number of trainable tokens in
// the whole global accumulated batch (in general: the objective's normaliser, train/objective.h) (all ranks, all micro-steps; all-reduced once per step before
// the first backward), and gradients are SUMMED across ranks. The update is therefore exactly the
// single-process update on the union of the data, however unevenly tokens fall across ranks or
// micro-batches (not a mean of per-micro-batch means).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Event.h>

#include "finetune/data/micro_batch_stream.h"
#include "finetune/ddp/communicator.h"
#include "finetune/ddp/ddp_defaults.h"
#include "finetune/ddp/grad_reducer.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/checkpoint_policy.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/finite_guard.h"
#include "finetune/train/log_window.h"
#include "finetune/train/loss_scaler.h"
#include "finetune/train/lr_schedule.h"
#include "finetune/train/metric_sinks.h"
#include "finetune/train/micro_step_graphs.h"
#include "finetune/train/objective.h"
#include "finetune/train/optimizer.h"
#include "finetune/report/metrics.h"
#include "finetune/train/rng_state.h"
#include "finetune/train/step_profiler.h"
#include "finetune/train/training_state.h"

namespace finetune {

struct TrainerConfig {
  int64_t total_steps = 1;
  int64_t logging_steps = 1;
  int64_t save_steps = 0;
  int64_t eval_steps = 0;
  // Note [Evaluation and save timing] (train/checkpoint_policy.h): HF's strategies, the metric's
  // direction (eval_loss: lower is better) and EarlyStoppingCallback's settings.
  IntervalStrategy eval_strategy = IntervalStrategy::Steps;
  IntervalStrategy save_strategy = IntervalStrategy::Steps;
  bool greater_is_better = false;
  int64_t early_stopping_patience = 0;  // 0: no early stopping
  double early_stopping_threshold = 0.0;
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
  bool overlap_graphed_all_reduce = false;  // MicroStepGraphsConfig::overlap_all_reduce
  // MicroStepGraphsConfig::max_tokens; unset: default_graph_max_tokens (train/micro_step_graphs.h).
  std::optional<int64_t> cuda_graph_max_tokens;
  // NEFTune's alpha (model/embedding_noise.h); 0: off. Its micro-steps run eagerly (no CUDA graphs):
  // each draws its noise from its own seeded generator (Note [NEFTune length and seeds]).
  double neftune_noise_alpha = 0;
  // Checkpointed layer inputs in host memory (Note [Activation offloading] in model/activation_offload.cpp).
  OffloadActivations offload_activations = OffloadActivations::kAuto;
};

struct TrainerHooks {
  // The global mean eval loss (a collective: every rank calls it); unset when there is no eval data.
  std::function<double()> evaluate;
  // Where the checkpoint of `step` goes (every rank asks: errors name the last good checkpoint).
  std::function<std::string(int64_t step)> checkpoint_dir;
  // Writes a checkpoint of the adapter and `state` (whose identity the hook fills in) into `dir`;
  // called on rank 0 only, and every rank learns whether it succeeded (ddp/rank0_agreement.h).
  std::function<void(const std::string& dir, TrainingState state)> save_checkpoint;
  // Whether this rank was asked to stop (a SIGTERM or SIGUSR1: Note [Preemption] in
  // launch/stop_request.h). Each step's token-count all-reduce carries every rank's answer, and
  // at the next step boundary all ranks stop together: they save a checkpoint of the steps done
  // (with save_checkpoint) and train() throws Preempted. Unset: never.
  std::function<bool()> stop_requested;
};

struct TrainResult {
  std::vector<double> step_losses;  // global mean train loss of every step
  std::optional<double> final_eval_loss;
  double elapsed_s = 0;
  int64_t tokens = 0;
  double mean_rank_imbalance = 1.0;  // over the logged lines (metrics.jsonl's rank_imbalance)
  double tokens_per_second() const { return static_cast<double>(tokens) / (elapsed_s > 0 ? elapsed_s : 1e-9); }
  // The mean of step_losses, HF Trainer's train_loss (_total_loss_scalar / global_step). A resumed
  // run's step_losses start with the checkpoint's, so it reports the mean over all its steps, as
  // the uninterrupted run would; HF instead divides only the resumed session's loss sum by the
  // global step, which understates it.
  double train_loss() const;
  std::string last_checkpoint;  // the newest checkpoint written, or "" (for error messages)
  // The best evaluation (eval_loss) and the checkpoint of its step, when one was saved there
  // (HF's best_metric, best_model_checkpoint); --load_best_model_at_end loads that checkpoint.
  std::optional<double> best_metric;
  std::string best_checkpoint;
  std::optional<int64_t> stopped_early_at;  // the step early stopping ended training after
};

class Trainer {
 public:
  // Builds the components (the reducer broadcasts rank 0's parameters; the generators are seeded)
  // and, where they are supported (micro_step_graphs_supported), the micro-step graphs; from then
  // on training runs on the graphs' stream. `objective` must outlive the Trainer.
  Trainer(CausalLM& model, const NamedTensors& trainable, MicroBatchStream& stream, Communicator& communicator,
          const TrainerConfig& config, const Objective& objective);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The resumable state, assembled from the components' own (a collective: every rank's
  // generator states are gathered). `identity` and `source_dir` are left for the caller.
  TrainingState state() const;
  // Continues from a checkpoint's state (the parameters already loaded into the model).
  void load_state(const TrainingState& state);

  // Steps from the current global step to config.total_steps, then the final evaluation.
  TrainResult train(const TrainerHooks& hooks);

 private:
  struct StepOutcome {
    at::Tensor grad_norm;  // before clipping (device scalar)
    double lr = 0;
    bool skipped = false;  // an fp16 step skipped for overflow
  };
  StepOutcome train_step(int64_t step);
  at::Tensor global_counts(const std::vector<HostBatch>& micro_batches, int64_t step);
  at::Tensor forward_backward(const HostBatch& micro_batch, const at::Tensor& normaliser,
                              const ForwardOptions& forward);
  // The forward options of micro-batch `index` of `step`: forward_options_, with this micro-batch's
  // NEFTune noise when the run has it.
  ForwardOptions micro_batch_forward(const HostBatch& micro_batch, int64_t step, int64_t index) const;
  StepOutcome update_parameters();
  // Note [Capture ahead] (train/micro_step_graphs.h): the graphs of the steps after `step`.
  void capture_coming_shapes(int64_t step);
  void after_step(int64_t step, const StepOutcome& outcome, const TrainerHooks& hooks, TrainResult& result);
  void log_line(int64_t step, const StepOutcome& outcome, std::optional<double> eval_loss);
  void save_checkpoint(int64_t step, const TrainerHooks& hooks);
  void record_evaluation(int64_t step, double eval_loss, const TrainerHooks& hooks, TrainResult& result);
  void finish(const TrainerHooks& hooks, TrainResult& result);
  bool stop_agreed() const;
  [[noreturn]] void stop_for_preemption(const TrainerHooks& hooks);
  std::string last_good_state() const;

  CausalLM& model_;
  MicroBatchStream& stream_;
  Communicator& communicator_;
  TrainerConfig config_;
  const Objective& objective_;
  std::vector<at::Tensor> parameters_;
  GradReducer reducer_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<LossScaler> scaler_;  // Note [fp16 loss scaling]: fp16 runs only
  TrainingGenerators generators_;
  LogWindow window_;
  std::optional<MetricSinks> sinks_;  // rank 0, while train() runs
  StepProfiler profiler_;
  FiniteGuard finite_;
  CheckpointPolicy policy_;  // when to evaluate and save, the best evaluation, early stopping
  std::string best_checkpoint_;
  ForwardOptions forward_options_;
  BatchLayout layout_;
  at::Tensor loss_scale_;  // undefined: no loss scaling
  // The last step's all-reduced count of ranks asked to stop, copied to pinned host memory right
  // behind its all-reduce (undefined before the first step); read at the next step boundary after
  // waiting for that copy alone (stop_votes_copied_), never for the rest of the queued work, so
  // the host keeps running ahead of the device between log lines.
  at::Tensor stop_votes_;
  std::optional<c10::Event> stop_votes_copied_;
  const std::function<bool()>* stop_requested_ = nullptr;  // the hook of the train() running
  int64_t global_step_ = 0;
  std::string last_checkpoint_;
  std::chrono::steady_clock::time_point start_;
  bool captured_ahead_ = false;  // capture_coming_shapes has run
  std::unique_ptr<MicroStepGraphs> graphs_;  // last: destroyed first, back on the caller's stream
};

// A Trainer with the supervised objective (CausalLmObjective), resumed from `resume` when given:
// the optimizer, the data position, the generators, the losses and metrics so far.
TrainResult train(CausalLM& model, const NamedTensors& trainable, MicroBatchStream& stream,
                  Communicator& communicator, const TrainerConfig& config, const TrainerHooks& hooks,
                  const TrainingState* resume = nullptr);
// The same with another objective (dpo, orpo: train/dpo_objective.h, train/orpo_objective.h).
TrainResult train(CausalLM& model, const NamedTensors& trainable, MicroBatchStream& stream,
                  Communicator& communicator, const TrainerConfig& config, const TrainerHooks& hooks,
                  const TrainingState* resume, const Objective& objective);

}  // namespace finetune
