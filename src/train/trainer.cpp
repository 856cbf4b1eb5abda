#include "finetune/train/trainer.h"

#include <chrono>
#include <filesystem>

#include "finetune/checkpoint/run_checkpoint.h"
#include "finetune/ddp/grad_reducer.h"
#include "finetune/launch/environment.h"
#include "finetune/report/metrics_scalars.h"
#include "finetune/report/tensorboard_writer.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/finite_guard.h"
#include "finetune/train/grad_clip.h"
#include "finetune/train/loss.h"
#include "finetune/train/loss_scaler.h"
#include "finetune/train/micro_step_graphs.h"
#include "finetune/train/rng_state.h"
#include "finetune/train/step_profiler.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool every(int64_t interval, int64_t step) { return interval > 0 && step % interval == 0; }

// Where the last good state is, for an error that stops the run.
std::string last_good_state(const std::string& last_checkpoint) {
  return last_checkpoint.empty() ? "no checkpoint was written (--save_steps)"
                                 : "the last good checkpoint is " + last_checkpoint;
}

}  // namespace

double TrainResult::train_loss() const {
  double sum = 0;  // in step order, as Python's sum() adds metrics.jsonl's losses
  for (const double loss : step_losses) sum += loss;
  return step_losses.empty() ? 0.0 : sum / static_cast<double>(step_losses.size());
}

TrainResult train(CausalLM& model, const NamedTensors& trainable, MicroBatchStream& stream,
                  Communicator& communicator, const TrainerConfig& config, const TrainerHooks& hooks,
                  const TrainingState* resume) {
  const bool is_main = communicator.rank() == 0;
  const auto device = model.device();
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device);

  GradReducerOptions reducer_options;
  reducer_options.bucket_cap_bytes = config.ddp_bucket_cap_mb << 20;
  reducer_options.find_unused_parameters = config.ddp_find_unused_parameters;
  GradReducer reducer(trainable, communicator, reducer_options);
  reducer.broadcast_parameters();

  std::vector<at::Tensor> parameters;
  for (const auto& [name, tensor] : trainable) parameters.push_back(tensor);
  const auto optimizer = make_optimizer(config.optim, parameters, config.adamw, model.kernel_policy().fused_adamw);
  // Note [fp16 loss scaling] (train/loss_scaler.h): fp16 runs only, as HF's fp16=True.
  std::optional<LossScaler> scaler;
  if (model.dtype() == at::kHalf) scaler.emplace(LossScalerConfig{}, device);

  TrainResult result;
  seed_generators(config.seed);
  int64_t start_step = 0;
  int64_t logged_steps = 0;  // steps whose loss went into result.step_losses through a log line
  std::vector<nlohmann::json> log_history;
  std::vector<at::Tensor> window_losses;  // per-step global mean loss (device scalars) since the last log
  auto window_tokens = at::zeros({}, f64);  // non-padding tokens since the last log, all ranks
  if (resume) {
    start_step = resume->global_step;
    result.last_checkpoint = resume->source_dir;
    optimizer->load_state(resume->optimizer);
    if (scaler && resume->loss_scaler) scaler->load_state(*resume->loss_scaler);  // else HF: init_scale
    stream.seek(resume->position.epoch, resume->position.steps_into_epoch);
    log_history = resume->log_history;
    logged_steps = log_history.empty() ? 0 : log_history.back().value("step", int64_t{0});
    result.step_losses.assign(resume->step_losses.begin(), resume->step_losses.begin() + logged_steps);
    for (size_t i = static_cast<size_t>(logged_steps); i < resume->step_losses.size(); ++i) {
      window_losses.push_back(at::scalar_tensor(resume->step_losses[i], f64));
    }
    result.tokens = log_history.empty() ? 0 : log_history.back().value("tokens", int64_t{0});
    window_tokens.fill_(static_cast<double>(resume->tokens - result.tokens));
    const auto rank = static_cast<size_t>(communicator.rank());
    if (resume->identity.world_size == communicator.world_size()) {
      restore_generators(device, {resume->cpu_rng_states.at(rank), resume->device_rng_states.at(rank)});
    }
  }

  std::optional<MetricsWriter> metrics;
  std::optional<ProgressReporter> progress;
  std::optional<TensorBoardWriter> tensorboard;
  if (is_main) {
    std::filesystem::create_directories(config.output_dir);
    metrics.emplace(config.output_dir + "/metrics.jsonl");  // rewritten from the history on resume
    for (const auto& line : log_history) metrics->write_line(line.dump());
    // A new runs/ directory for every run, a resumed one too (as HF's TensorBoardCallback): it holds
    // what this run logs, and TensorBoard shows the earlier run's directory beside it.
    if (config.tensorboard) tensorboard.emplace(tensorboard_log_dir(config.output_dir, unix_time_now(), host_name()));
    progress.emplace(config.total_steps, stderr_is_terminal());
  }

  ForwardOptions forward_options;
  forward_options.training = true;
  forward_options.gradient_checkpointing = config.gradient_checkpointing;
  // Note [Graphed micro-steps]; from here on training runs on the graphs' stream.
  std::unique_ptr<MicroStepGraphs> graphs;
  if (config.cuda_graphs && device.is_cuda() && model.kernel_policy().variable_length_attention &&
      model.cuda_graph_safe()) {
    graphs = std::make_unique<MicroStepGraphs>(model, forward_options, MicroStepGraphsConfig{});
  }
  const at::Tensor loss_scale = scaler ? scaler->scale() : at::Tensor();  // undefined: no loss scaling

  StepProfiler profiler(config.profile_start_step, config.profile_steps, config.output_dir, communicator.rank(),
                        device);
  FiniteGuard finite(device);
  const auto start = Clock::now();
  auto window_start = start;
  at::Tensor grad_norm;
  double lr = 0;

  for (int64_t step = start_step; step < config.total_steps; ++step) {
    profiler.before_step(step + 1);
    auto micro_batches = stream.next_step();
    double local_trainable = 0, local_real = 0;
    for (const auto& batch : micro_batches) {
      local_trainable += static_cast<double>(batch.trainable_tokens);
      local_real += static_cast<double>(batch.real_tokens);
    }
    // Note [Global token normalisation]: one small all-reduce before the first backward.
    auto counts = at::tensor({local_trainable, local_real}, at::TensorOptions().dtype(at::kDouble));
    // From pinned memory the copy is queued behind the previous step's kernels; a pageable copy
    // would wait for them on the host and leave the GPU idle while the next step is issued.
    if (device.is_cuda()) counts = counts.pin_memory().to(device, /*non_blocking=*/true);
    communicator.all_reduce(counts, "token count of step " + std::to_string(step + 1));
    const auto global_tokens = counts[0].to(at::kFloat);

    auto step_loss_sum = at::zeros({}, f64);
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      reducer.prepare_for_backward(/*sync=*/i + 1 == micro_batches.size());
      at::Tensor loss_sum;
      if (graphs && graphs->accepts(micro_batches[i])) {
        loss_sum = graphs->run(micro_batches[i], global_tokens, loss_scale, reducer);
      } else {
        const auto batch = to_device(micro_batches[i], device, model.kernel_policy().variable_length_attention);
        auto hidden = model.forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward_options);
        loss_sum = causal_lm_loss_sum(model, hidden, batch.target_positions, batch.target_ids);
        backward_normalised_loss(loss_sum, global_tokens, loss_scale);
      }
      step_loss_sum += loss_sum.detach().to(at::kDouble);
    }
    reducer.finalize();
    if (scaler) {
      std::vector<at::Tensor> grads;
      for (const auto& p : parameters) grads.push_back(p.grad());
      scaler->unscale(grads);  // before clipping, as HF's accelerator.clip_grad_norm_
    }
    grad_norm = clip_grad_norm(parameters, config.max_grad_norm);
    // The schedule counts the updates taken: an fp16 step skipped for overflow leaves it (HF).
    lr = config.learning_rate * lr_multiplier(config.schedule, optimizer->steps_taken());
    const bool skipped = scaler && scaler->step_was_skipped();
    if (!skipped) optimizer->step(lr);
    if (scaler) scaler->update();
    reducer.zero_grad();

    communicator.all_reduce(step_loss_sum, "loss of step " + std::to_string(step + 1));
    window_losses.push_back(step_loss_sum / counts[0]);
    window_tokens += counts[1];
    // A skipped fp16 step's gradient norm is inf / NaN by construction: overflow, not divergence.
    finite.record(step + 1, window_losses.back(), skipped ? at::Tensor() : grad_norm);
    profiler.after_step(step + 1);

    const int64_t done = step + 1;
    if (every(config.ddp_check_consistency_steps, done)) {
      reducer.check_parameters_consistent("step " + std::to_string(done));
    }
    std::optional<double> eval_loss;
    if (hooks.evaluate && every(config.eval_steps, done)) {
      eval_loss = hooks.evaluate();
      result.final_eval_loss = eval_loss;
    }
    const bool log_now = every(config.logging_steps, done) || done == config.total_steps || eval_loss;
    if (log_now) {
      finite.check(last_good_state(result.last_checkpoint));  // the losses are read here anyway
      auto losses = at::stack(window_losses).cpu();
      StepMetrics m;
      m.step = done;
      m.epoch = static_cast<double>(done) / static_cast<double>(stream.steps_per_epoch());
      m.loss = losses.mean().item<double>();
      m.lr = lr;
      m.grad_norm = grad_norm.item<double>();
      const auto tokens = static_cast<int64_t>(window_tokens.item<double>());
      result.tokens += tokens;
      m.tokens = result.tokens;
      m.tokens_per_s = static_cast<double>(tokens) / std::max(1e-9, seconds_since(window_start));
      m.elapsed_s = seconds_since(start);
      m.eval_loss = eval_loss;
      for (int64_t i = 0; i < losses.size(0); ++i) result.step_losses.push_back(losses[i].item<double>());
      logged_steps = done;
      log_history.push_back(metrics_json(m));
      if (is_main) {
        metrics->write(m);
        if (tensorboard) tensorboard->add_scalars(done, step_scalars(m));
        progress->report(m);
      }
      window_losses.clear();
      window_tokens.zero_();
      window_start = Clock::now();
    }
    if (every(config.save_steps, done) && done != config.total_steps && hooks.save_checkpoint) {
      finite.check(last_good_state(result.last_checkpoint));  // never write a diverged adapter
      TrainingState state;
      state.global_step = done;
      state.total_steps = config.total_steps;
      state.position = {stream.epoch(), stream.steps_into_epoch()};
      state.log_history = log_history;
      state.step_losses = result.step_losses;
      for (const auto& loss : window_losses) state.step_losses.push_back(loss.item<double>());
      state.tokens = result.tokens + static_cast<int64_t>(window_tokens.item<double>());
      state.optimizer = optimizer->state();
      if (scaler) state.loss_scaler = scaler->state();
      for (const auto& states : gather_generators(capture_generators(device), communicator, device)) {
        state.cpu_rng_states.push_back(states.cpu);
        state.device_rng_states.push_back(states.device);
      }
      const std::string dir = checkpoint_path(config.output_dir, done);
      std::string failure;
      if (is_main) {
        try {
          hooks.save_checkpoint(dir, std::move(state));
        } catch (const std::exception& e) {
          failure = e.what();
        }
      }
      // Every rank learns the outcome, so all stop together when the save failed.
      auto failed = at::full({1}, failure.empty() ? 0.0 : 1.0, f64);
      communicator.all_reduce(failed, "checkpoint save at step " + std::to_string(done));
      if (failed.item<double>() != 0) {
        throw Error("checkpoint at step " + std::to_string(done) + " could not be saved" +
                    (failure.empty() ? " (rank 0 failed)" : ": " + failure) + "; " +
                    last_good_state(result.last_checkpoint));
      }
      result.last_checkpoint = dir;
    }
  }
  if (progress) progress->finish();
  if (graphs && is_main) {
    log::info("CUDA graphs: " + std::to_string(graphs->graphs_captured()) + " micro-step shapes captured, " +
              std::to_string(graphs->replays()) + " replays");
  }
  finite.check(last_good_state(result.last_checkpoint));
  result.elapsed_s = seconds_since(start);
  const bool final_eval = hooks.evaluate && !every(config.eval_steps, config.total_steps);
  if (final_eval) result.final_eval_loss = hooks.evaluate();
  if (tensorboard) {
    // HF's end-of-training log; the final evaluation only where no metrics.jsonl line holds it.
    tensorboard->add_scalars(config.total_steps, summary_scalars({result.train_loss(), result.elapsed_s,
                                                                  result.tokens_per_second(),
                                                                  final_eval ? result.final_eval_loss : std::nullopt}));
  }
  return result;
}

}  // namespace finetune
