#include "finetune/train/trainer.h"

#include <algorithm>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "finetune/ddp/rank0_agreement.h"
#include "finetune/model/device_memory.h"
#include "finetune/train/grad_clip.h"
#include "finetune/train/micro_step.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool every(int64_t interval, int64_t step) { return interval > 0 && step % interval == 0; }

std::vector<at::Tensor> tensors_of(const NamedTensors& named) {
  std::vector<at::Tensor> tensors;
  for (const auto& [name, tensor] : named) tensors.push_back(tensor);
  return tensors;
}

GradReducerOptions reducer_options_from(const TrainerConfig& config, const at::Device& device) {
  GradReducerOptions options;
  options.bucket_cap_bytes = config.ddp_bucket_cap_mb << 20;
  options.find_unused_parameters = config.ddp_find_unused_parameters;
  options.defer_verdict = device.is_cuda();  // Note [Deferred verdict] in ddp/grad_reducer.h
  return options;
}

ForwardOptions training_forward(const TrainerConfig& config, const at::Device& device) {
  ForwardOptions options;
  options.training = true;
  options.gradient_checkpointing = config.gradient_checkpointing;
  options.offload_activations_above_bytes = offload_above_bytes(config.offload_activations, device);
  return options;
}

// CUDA graphs capture micro-steps whose inputs go to host memory into the graphs' own arena
// (MicroStepGraphsConfig::offload_activations), not by the eager path's pinned tensor per input,
// which could not be captured.
ForwardOptions without_offloading(ForwardOptions options) {
  options.offload_activations_above_bytes.reset();
  return options;
}

std::string step_name(int64_t step) { return "step " + std::to_string(step); }

// Trainer::global_counts' layout: normaliser, non-padding tokens, stop votes, then each rank's tokens.
constexpr int64_t kRankTokensOffset = 3;
CheckpointPolicyConfig policy_config_from(const TrainerConfig& config) {
  return {config.eval_strategy,  config.eval_steps,      config.save_strategy,           config.save_steps,
          config.greater_is_better, config.early_stopping_patience, config.early_stopping_threshold};
}

}  // namespace

double TrainResult::train_loss() const {
  double sum = 0;  // in step order, as Python's sum() adds metrics.jsonl's losses
  for (const double loss : step_losses) sum += loss;
  return step_losses.empty() ? 0.0 : sum / static_cast<double>(step_losses.size());
}

Trainer::Trainer(CausalLM& model, const NamedTensors& trainable, MicroBatchStream& stream, Communicator& communicator,
                 const TrainerConfig& config, const Objective& objective)
    : model_(model), stream_(stream), communicator_(communicator), config_(config), objective_(objective),
      parameters_(tensors_of(trainable)),
      reducer_(trainable, communicator, reducer_options_from(config, model.device())),
      optimizer_(make_optimizer(config.optim, parameters_, config.adamw, model.kernel_policy().fused_adamw)),
      generators_(model.device(), communicator, config.seed),
      window_(model.device(), objective.metric_names()),
      profiler_(config.profile_start_step, config.profile_steps, config.output_dir, communicator.rank(), model.device()),
      finite_(model.device()),
      policy_(policy_config_from(config), stream.steps_per_epoch(), config.total_steps),
      forward_options_(training_forward(config, model.device())),
      layout_(batch_layout_for(model.kernel_policy())),
      start_(Clock::now()) {
  reducer_.broadcast_parameters();
  // Checkpointed layer inputs go to host memory: offloading asked, and layers recomputed.
  const bool offloading = config.gradient_checkpointing && forward_options_.offload_activations_above_bytes;
  if (offloading && communicator.rank() == 0) {
    log::info("activation offloading: each layer's checkpointed input goes to pinned host memory until its "
              "recompute (--offload_activations)");
  }
  // Note [fp16 loss scaling] (train/loss_scaler.h): fp16 runs only, as HF's fp16=True.
  if (model.dtype() == at::kHalf) scaler_.emplace(LossScalerConfig{}, model.device());
  if (scaler_) loss_scale_ = scaler_->scale();
  // Note [Graphed micro-steps]; from here on training runs on the graphs' stream.
  if (config.neftune_noise_alpha > 0 && communicator.rank() == 0) {
    log::info("NEFTune: uniform noise (alpha " + c10::str(config.neftune_noise_alpha) +
              ") on the input embeddings while training; micro-steps run eagerly (no CUDA graphs)");
  }
  const bool graphs_asked = config.cuda_graphs && config.neftune_noise_alpha == 0;
  const std::string graphs_unsupported = graphs_asked ? micro_step_graphs_unsupported_reason(model, objective) : "";
  if (graphs_asked && graphs_unsupported.empty()) {
    MicroStepGraphsConfig graph_config;
    graph_config.offload_activations = offloading;
    graph_config.overlap_all_reduce = config.overlap_graphed_all_reduce;
    graph_config.max_tokens =
        config.cuda_graph_max_tokens.value_or(default_graph_max_tokens(model.config(), offloading));
    graphs_ = std::make_unique<MicroStepGraphs>(model, without_offloading(forward_options_), graph_config, objective);
  } else if (graphs_asked && model.device().is_cuda() && communicator.rank() == 0) {
    log::info("CUDA graphs off: " + graphs_unsupported + "; micro-steps run eagerly");
  }
}

Trainer::~Trainer() = default;

TrainingState Trainer::state() const {
  TrainingState state;
  state.global_step = global_step_;
  state.total_steps = config_.total_steps;
  state.position = stream_.state();
  state.metrics = window_.state();
  state.optimizer = optimizer_->state();
  if (scaler_) state.loss_scaler = scaler_->state();
  state.generators = generators_.state();
  state.best_metric = policy_.best_metric();
  state.best_model_checkpoint = best_checkpoint_;
  return state;
}

void Trainer::load_state(const TrainingState& state) {
  global_step_ = state.global_step;
  last_checkpoint_ = state.source_dir;
  optimizer_->load_state(state.optimizer);
  if (scaler_ && state.loss_scaler) scaler_->load_state(*state.loss_scaler);  // else HF: init_scale
  stream_.load_state(state.position);
  window_.load_state(state.metrics);
  generators_.load_state(state.generators);
  policy_.replay(state.metrics.log_history);  // the evaluations so far decide the best and the patience
  best_checkpoint_ = state.best_model_checkpoint;
}

bool Trainer::stop_agreed() const {
  if (!stop_votes_.defined()) return false;
  if (stop_votes_copied_) stop_votes_copied_->synchronize();
  return stop_votes_.item<double>() > 0;
}

// Note [Preemption]: every rank is here at the same step boundary, with the same steps done.
void Trainer::stop_for_preemption(const TrainerHooks& hooks) {
  const bool saved_now = hooks.save_checkpoint && last_checkpoint_ != hooks.checkpoint_dir(global_step_);
  if (saved_now) save_checkpoint(global_step_, hooks);
  if (sinks_) sinks_->finish_progress();
  throw Preempted("stopped after step " + std::to_string(global_step_) + " of " +
                  std::to_string(config_.total_steps) + ": a rank was sent SIGTERM or SIGUSR1; " +
                  (last_checkpoint_.empty() ? std::string("no checkpoint could be written (no save hook)")
                                            : (saved_now ? "saved " : "the newest checkpoint is ") + last_checkpoint_ +
                                                  " (continue with --resume_from_checkpoint true)"));
}

std::string Trainer::last_good_state() const {
  return last_checkpoint_.empty() ? "no checkpoint was written (--save_steps)"
                                  : "the last good checkpoint is " + last_checkpoint_;
}

TrainResult Trainer::train(const TrainerHooks& hooks) {
  if (hooks.save_checkpoint && !hooks.checkpoint_dir) {
    throw Error("trainer: a save_checkpoint hook needs a checkpoint_dir hook (where each checkpoint goes)");
  }
  if (communicator_.rank() == 0) {
    sinks_.emplace(config_.output_dir, config_.tensorboard, config_.total_steps, window_.history());
  }
  TrainResult result;
  start_ = Clock::now();
  window_.restart_clock();
  stop_requested_ = hooks.stop_requested ? &hooks.stop_requested : nullptr;
  for (int64_t step = global_step_ + 1; step <= config_.total_steps; ++step) {
    if (stop_agreed()) stop_for_preemption(hooks);
    profiler_.before_step(step);
    const StepOutcome outcome = train_step(step);
    if (graphs_ && !captured_ahead_ && graphs_->warmed_up()) capture_coming_shapes(step);
    // A skipped fp16 step's gradient norm is inf / NaN by construction: overflow, not divergence.
    finite_.record(step, window_.last_loss(), outcome.skipped ? at::Tensor() : outcome.grad_norm);
    profiler_.after_step(step);
    global_step_ = step;
    after_step(step, outcome, hooks, result);
    // Early stopping: every rank saw the same all-reduced eval losses, so all stop after this step.
    if (policy_.should_stop() && step < config_.total_steps) {
      result.stopped_early_at = step;
      break;
    }
  }
  finish(hooks, result);
  return result;
}

Trainer::StepOutcome Trainer::train_step(int64_t step) {
  // Every rank gets as many micro-batches (data/micro_batch_stream.h), so prepare_for_backward()
  // and finalize() pair up across ranks; an empty one has zero weight and runs nothing (finalize()
  // reduces what the rank's earlier micro-batches accumulated).
  const auto micro_batches = stream_.next_step();
  const auto counts = global_counts(micro_batches, step);  // (normaliser, non-padding tokens, stop votes, per rank)
  const auto normaliser = counts[0].to(at::kFloat);
  // The loss sum, then the objective's metric sums (train/objective.h): one all-reduce for all.
  const auto metrics = static_cast<int64_t>(objective_.metric_names().size());
  auto sums = at::zeros({1 + metrics}, at::TensorOptions().dtype(at::kDouble).device(model_.device()));
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    reducer_.prepare_for_backward(/*sync=*/i + 1 == micro_batches.size());
    if (micro_batches[i].rows == 0) continue;
    sums += forward_backward(micro_batches[i], normaliser, micro_batch_forward(micro_batches[i], step, i));
  }
  reducer_.finalize();
  const StepOutcome outcome = update_parameters();
  communicator_.all_reduce(sums, "loss of " + step_name(step));
  const auto means = sums / counts[0];
  window_.add_step(means[0], counts[1], counts.narrow(0, kRankTokensOffset, communicator_.world_size()),
                   metrics > 0 ? means.narrow(0, 1, metrics) : at::Tensor());
  return outcome;
}

// Note [Global token normalisation]: one small all-reduce before the first backward.
at::Tensor Trainer::global_counts(const std::vector<HostBatch>& micro_batches, int64_t step) {
  double normaliser = 0, real_tokens = 0;
  for (const auto& batch : micro_batches) {
    if (batch.rows == 0) continue;  // a zero-weight micro-batch
    normaliser += objective_.normaliser_share(batch);
    real_tokens += static_cast<double>(batch.real_tokens);
  }
  // The third count: ranks asked to stop (Note [Preemption]), agreed on with the step's tokens;
  // then one slot per rank, each rank's own tokens (the sum gathers them: rank_imbalance).
  const double stop_vote = stop_requested_ != nullptr && (*stop_requested_)() ? 1.0 : 0.0;
  auto counts = at::zeros({kRankTokensOffset + communicator_.world_size()}, at::TensorOptions().dtype(at::kDouble));
  auto slots = counts.accessor<double, 1>();
  slots[0] = normaliser;
  slots[1] = real_tokens;
  slots[2] = stop_vote;
  slots[kRankTokensOffset + communicator_.rank()] = real_tokens;
  // From pinned memory the copy is queued behind the previous step's kernels; a pageable copy
  // would wait for them on the host and leave the GPU idle while the next step is issued.
  if (!model_.device().is_cpu()) counts = counts.pin_memory().to(model_.device(), /*non_blocking=*/true);
  communicator_.all_reduce(counts, "token count of " + step_name(step));
  if (model_.device().is_cpu()) {
    stop_votes_ = counts[2];  // the all-reduce has finished
  } else {
    if (!stop_votes_.defined()) stop_votes_ = at::empty({}, at::TensorOptions().dtype(at::kDouble).pinned_memory(true));
    stop_votes_.copy_(counts[2], /*non_blocking=*/true);
    const auto* streams = c10::impl::getDeviceGuardImpl(model_.device().type());
    if (!stop_votes_copied_) stop_votes_copied_.emplace(model_.device().type());
    stop_votes_copied_->record(streams->getStream(model_.device()));
  }
  return counts;
}

ForwardOptions Trainer::micro_batch_forward(const HostBatch& micro_batch, int64_t step, int64_t index) const {
  ForwardOptions forward = forward_options_;
  if (config_.neftune_noise_alpha > 0) {  // Note [NEFTune length and seeds] (model/embedding_noise.h)
    for (const auto& row : micro_batch.sample_lengths) {
      if (row.size() > 1) throw Error("NEFTune: a micro-batch row packs several samples; it has no padded length");
    }
    forward.embedding_noise = EmbeddingNoise{config_.neftune_noise_alpha, micro_batch.seq_len,
                                             embedding_noise_seed(config_.seed, step, communicator_.rank(), index)};
  }
  return forward;
}

at::Tensor Trainer::forward_backward(const HostBatch& micro_batch, const at::Tensor& normaliser,
                                     const ForwardOptions& forward) {
  LossAndMetrics out;
  if (graphs_ && graphs_->accepts(micro_batch)) {  // a replay returns the metric sums too
    out = graphs_->run(micro_batch, normaliser, loss_scale_, reducer_);
  } else {
    const auto batch = to_device(micro_batch, model_.device(), layout_);
    out = forward_backward_with_metrics(model_, micro_batch_inputs(batch), forward, objective_, normaliser, loss_scale_);
  }
  const auto loss = out.loss_sum.to(at::kDouble).reshape({1});
  return out.metric_sums.defined() ? at::cat({loss, out.metric_sums}) : loss;
}

Trainer::StepOutcome Trainer::update_parameters() {
  StepOutcome outcome;
  if (scaler_) {
    std::vector<at::Tensor> grads;
    for (const auto& p : parameters_) grads.push_back(p.grad());
    scaler_->unscale(grads);  // before clipping, as HF's accelerator.clip_grad_norm_
  }
  outcome.grad_norm = clip_grad_norm(parameters_, config_.max_grad_norm);
  // The schedule counts the updates taken: an fp16 step skipped for overflow leaves it (HF).
  outcome.lr = config_.learning_rate * lr_multiplier(config_.schedule, optimizer_->steps_taken());
  outcome.skipped = scaler_ && scaler_->step_was_skipped();
  if (!outcome.skipped) optimizer_->step(outcome.lr);
  if (scaler_) scaler_->update();
  reducer_.zero_grad();
  return outcome;
}

void Trainer::capture_coming_shapes(int64_t step) {
  captured_ahead_ = true;
  const int64_t before = graphs_->graphs_captured();
  const MicroBatchStreamState position = stream_.state();
  const int64_t last = std::min(config_.total_steps, step + kCudaGraphCaptureAheadSteps);
  for (int64_t coming = step + 1; coming <= last; ++coming) {
    for (const auto& micro_batch : stream_.next_step()) {
      if (micro_batch.rows > 0) graphs_->capture_ahead(micro_batch, loss_scale_, reducer_);
    }
  }
  stream_.load_state(position);  // the coming steps are read again, in order, as they come
  if (communicator_.rank() == 0) {
    log::info("CUDA graphs: " + std::to_string(graphs_->graphs_captured() - before) +
              " micro-step shapes of steps " + std::to_string(step + 1) + "-" + std::to_string(last) +
              " captured ahead");
  }
}

void Trainer::after_step(int64_t step, const StepOutcome& outcome, const TrainerHooks& hooks, TrainResult& result) {
  if (every(config_.ddp_check_consistency_steps, step)) reducer_.check_parameters_consistent(step_name(step));
  std::optional<double> eval_loss;
  if (hooks.evaluate && policy_.evaluate_at(step)) {
    eval_loss = hooks.evaluate();
    record_evaluation(step, *eval_loss, hooks, result);
  }
  if (every(config_.logging_steps, step) || step == config_.total_steps || eval_loss) {
    log_line(step, outcome, eval_loss);
  }
  // Note [Evaluation and save timing]: HF's DefaultFlowCallback.
  if (policy_.save_at(step) && hooks.save_checkpoint) save_checkpoint(step, hooks);
}

void Trainer::record_evaluation(int64_t step, double eval_loss, const TrainerHooks& hooks, TrainResult& result) {
  result.final_eval_loss = eval_loss;
  policy_.record_evaluation(step, eval_loss);
  // The final evaluation (finish) comes after the last step's save: its checkpoint is the best's.
  if (policy_.best_step() == step && !last_checkpoint_.empty() && hooks.checkpoint_dir &&
      last_checkpoint_ == hooks.checkpoint_dir(step)) {
    best_checkpoint_ = last_checkpoint_;
  }
}

void Trainer::log_line(int64_t step, const StepOutcome& outcome, std::optional<double> eval_loss) {
  finite_.check(last_good_state());  // the losses are read here anyway
  StepMetrics line;
  line.step = step;
  line.epoch = static_cast<double>(step) / static_cast<double>(stream_.steps_per_epoch());
  line.lr = outcome.lr;
  line.grad_norm = outcome.grad_norm.item<double>();
  line.elapsed_s = seconds_since(start_);
  line.peak_memory_gib = peak_device_memory_gib(model_.device());
  line.eval_loss = eval_loss;
  line = window_.close(line);
  if (sinks_) sinks_->write(line);
}

void Trainer::save_checkpoint(int64_t step, const TrainerHooks& hooks) {
  finite_.check(last_good_state());  // never write a diverged adapter
  const std::string dir = hooks.checkpoint_dir(step);
  // HF's _save_checkpoint: the checkpoint of the best evaluation's step is the best model's.
  const std::string best_before = best_checkpoint_;
  if (policy_.best_step() == step) best_checkpoint_ = dir;
  TrainingState state = this->state();
  const auto outcome = run_on_rank0_then_agree(communicator_, model_.device(), "checkpoint save at " + step_name(step),
                                               [&] { hooks.save_checkpoint(dir, std::move(state)); });
  if (outcome.failed) {
    best_checkpoint_ = best_before;
    throw Error("checkpoint at step " + std::to_string(step) + " could not be saved: " +
                outcome.message("the save") + "; " + last_good_state());
  }
  last_checkpoint_ = dir;
}

void Trainer::finish(const TrainerHooks& hooks, TrainResult& result) {
  reducer_.settle();  // the last step's unused-parameter verdict, when it was deferred
  if (sinks_) sinks_->finish_progress();
  if (graphs_ && communicator_.rank() == 0) {
    log::info("CUDA graphs: " + std::to_string(graphs_->graphs_captured()) + " micro-step shapes captured, " +
              std::to_string(graphs_->replays()) + " replays");
  }
  finite_.check(last_good_state());
  result.step_losses = window_.logged_step_losses();
  result.tokens = window_.logged_tokens();
  result.mean_rank_imbalance = window_.mean_rank_imbalance();
  result.last_checkpoint = last_checkpoint_;
  result.elapsed_s = seconds_since(start_);
  // Note [Evaluation and save timing]: the last step's evaluation under "steps", unless it had one.
  const bool final_eval = hooks.evaluate && policy_.evaluate_after_training(global_step_);
  if (final_eval) record_evaluation(global_step_, hooks.evaluate(), hooks, result);
  result.best_metric = policy_.best_metric();
  result.best_checkpoint = best_checkpoint_;
  if (sinks_) {
    // HF's end-of-training log; the final evaluation only where no metrics.jsonl line holds it.
    sinks_->write_summary(global_step_, {result.train_loss(), result.elapsed_s, result.tokens_per_second(),
                                                final_eval ? result.final_eval_loss : std::nullopt});
  }
  sinks_.reset();
}

TrainResult train(CausalLM& model, const NamedTensors& trainable, MicroBatchStream& stream,
                  Communicator& communicator, const TrainerConfig& config, const TrainerHooks& hooks,
                  const TrainingState* resume) {
  const CausalLmObjective objective(model.config());
  return train(model, trainable, stream, communicator, config, hooks, resume, objective);
}

TrainResult train(CausalLM& model, const NamedTensors& trainable, MicroBatchStream& stream,
                  Communicator& communicator, const TrainerConfig& config, const TrainerHooks& hooks,
                  const TrainingState* resume, const Objective& objective) {
  Trainer trainer(model, trainable, stream, communicator, config, objective);
  if (resume) trainer.load_state(*resume);
  return trainer.train(hooks);
}

}  // namespace finetune
