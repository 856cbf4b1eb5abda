// The trainer on the CPU with a tiny model: its state() / load_state() round trip,
// a run resumed from a state trains bit for bit what the uninterrupted run trains, and a step's
// logged loss is the plain cross-entropy over shifted labels divided by the global token count.
#include <gtest/gtest.h>

#include "../test_support.h"
#include "finetune/data/batch.h"
#include "finetune/ddp/communicator.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/trainer.h"
#include "trainer_test_model.h"

namespace finetune {
namespace {

using testing::TempDir;

MicroBatchStreamConfig stream_config(StepPlanning planning = StepPlanning::balanced) {
  MicroBatchStreamConfig config;
  config.planning = planning;
  config.sampler.seed = 5;
  config.sampler.shuffle = true;
  config.batch_size = 2;
  config.gradient_accumulation_steps = 2;
  return config;
}

// 10 samples, 2 x 2 per step: steps of 4, 4 and 2 samples per epoch, so 4 steps cross an epoch
// boundary.
TrainerConfig trainer_config(const std::string& output_dir) {
  TrainerConfig config;
  config.total_steps = 4;
  config.logging_steps = 3;  // a checkpoint at step 2 cuts the first log window
  config.learning_rate = 5e-2;
  config.gradient_checkpointing = false;
  config.output_dir = output_dir;
  config.seed = 11;
  return config;
}

// One run's inputs: a fresh tiny model with LoRA dropout (the generators matter), the samples and
// a world of one.
struct TrainingRun {
  explicit TrainingRun(StepPlanning planning = StepPlanning::balanced) : stream{samples, stream_config(planning)} {}
  TempDir output{"trainer"};
  std::unique_ptr<CausalLM> model = testing::tiny_lora_model(/*lora_dropout=*/0.2);
  NamedTensors trainable = lora_parameters(*model);
  std::vector<Sample> samples = testing::tiny_samples(10);
  std::unique_ptr<Communicator> communicator = make_communicator(LaunchEnv{}, at::kCPU, CommunicatorOptions{});
  MicroBatchStream stream;
  CausalLmObjective objective{model->config()};
  TrainerConfig config = trainer_config(output.str());
};

std::vector<at::Tensor> adapter_copy(const NamedTensors& trainable) {
  std::vector<at::Tensor> out;
  for (const auto& [name, tensor] : trainable) out.push_back(tensor.detach().clone());
  return out;
}

// A new process: `resumed`'s fresh model and components with the checkpoint's adapter values.
void load_adapter(TrainingRun& resumed, const std::vector<at::Tensor>& saved_adapter) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < saved_adapter.size(); ++i) resumed.trainable[i].second.copy_(saved_adapter[i]);
}

void expect_equal_tensors(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << i;
}

TEST(Trainer, ResumingFromItsStateTrainsBitwiseWhatTheUninterruptedRunTrains) {
  TrainingRun uninterrupted;
  const auto full = Trainer(*uninterrupted.model, uninterrupted.trainable, uninterrupted.stream,
                            *uninterrupted.communicator, uninterrupted.config, uninterrupted.objective)
                        .train({});
  ASSERT_EQ(full.step_losses.size(), 4u);

  // The same run with a checkpoint at step 2 (kept in memory); saving changes nothing.
  TrainingRun saving;
  saving.config.save_steps = 2;
  std::optional<TrainingState> saved;
  std::vector<at::Tensor> saved_adapter;
  TrainerHooks hooks;
  hooks.checkpoint_dir = [](int64_t step) { return "memory-" + std::to_string(step); };
  hooks.save_checkpoint = [&](const std::string&, TrainingState state) {
    if (state.global_step != 2) return;  // the last step's checkpoint (HF saves one there too) is not used
    saved = std::move(state);
    saved_adapter = adapter_copy(saving.trainable);
  };
  const auto with_save =
      Trainer(*saving.model, saving.trainable, saving.stream, *saving.communicator, saving.config, saving.objective)
          .train(hooks);
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->global_step, 2);
  EXPECT_EQ(with_save.step_losses, full.step_losses);
  EXPECT_EQ(with_save.last_checkpoint, "memory-4");  // every save_steps, and the last step

  TrainingRun resumed;
  load_adapter(resumed, saved_adapter);
  Trainer trainer(*resumed.model, resumed.trainable, resumed.stream, *resumed.communicator, resumed.config,
                  resumed.objective);
  trainer.load_state(*saved);
  const auto rest = trainer.train({});
  EXPECT_EQ(rest.step_losses, full.step_losses);  // bit for bit, the restored window's steps too
  EXPECT_EQ(rest.tokens, full.tokens);
  expect_equal_tensors(adapter_copy(resumed.trainable), adapter_copy(uninterrupted.trainable));
  // metrics.jsonl holds the uninterrupted run's lines (the times aside).
  EXPECT_EQ(trainer.state().metrics.log_history.size(), 2u);
}

TEST(Trainer, StateSurvivesALoadIntoAFreshTrainer) {
  TrainingRun first;
  first.config.total_steps = 3;
  Trainer trainer(*first.model, first.trainable, first.stream, *first.communicator, first.config, first.objective);
  trainer.train({});
  const TrainingState state = trainer.state();
  EXPECT_EQ(state.global_step, 3);
  EXPECT_EQ(state.total_steps, 3);
  EXPECT_EQ(state.position.epoch, 0);  // 3 steps per epoch: all of epoch 0 taken
  EXPECT_EQ(state.position.steps_into_epoch, 3);
  EXPECT_EQ(state.metrics.step_losses.size(), 3u);
  EXPECT_EQ(state.optimizer.steps, 3);
  ASSERT_EQ(state.generators.size(), 1u);
  EXPECT_FALSE(state.loss_scaler.has_value());  // fp32: no loss scaling

  TrainingRun second;
  Trainer fresh(*second.model, second.trainable, second.stream, *second.communicator, second.config,
                second.objective);
  fresh.load_state(state);
  const TrainingState again = fresh.state();
  EXPECT_EQ(again.global_step, state.global_step);
  EXPECT_EQ(again.position.epoch, state.position.epoch);
  EXPECT_EQ(again.position.steps_into_epoch, state.position.steps_into_epoch);
  EXPECT_EQ(again.metrics.step_losses, state.metrics.step_losses);
  EXPECT_EQ(again.metrics.tokens, state.metrics.tokens);
  EXPECT_EQ(again.metrics.log_history, state.metrics.log_history);
  EXPECT_EQ(again.optimizer.steps, state.optimizer.steps);
  ASSERT_EQ(again.optimizer.parameters.size(), state.optimizer.parameters.size());
  for (size_t i = 0; i < state.optimizer.parameters.size(); ++i) {
    for (size_t k = 0; k < state.optimizer.parameters[i].size(); ++k) {
      EXPECT_TRUE(at::equal(again.optimizer.parameters[i][k].second, state.optimizer.parameters[i][k].second));
    }
  }
  EXPECT_TRUE(at::equal(again.generators[0].cpu, state.generators[0].cpu));
}

// Note [Global token normalisation]: the logged loss of a step of two micro-batches (literal
// planning; balanced plans the step's 4 samples as one) is the summed cross-entropy over them,
// divided by the step's trained tokens.
TEST(Trainer, StepLossIsTheCrossEntropyOverShiftedLabelsPerGlobalToken) {
  for (StepPlanning planning : {StepPlanning::literal, StepPlanning::balanced}) {
    SCOPED_TRACE(step_planning_name(planning));
    TrainingRun run(planning);
    run.model = testing::tiny_lora_model(/*lora_dropout=*/0.0);  // a deterministic forward to compare with
    run.trainable = lora_parameters(*run.model);
    run.config.total_steps = 1;
    MicroBatchStream preview(run.samples, stream_config(planning));
    EXPECT_EQ(MicroBatchStream(run.samples, stream_config(planning)).next_step().size(),
              planning == StepPlanning::literal ? 2u : 1u);
    double loss_sum = 0, tokens = 0;
    {
      at::NoGradGuard no_grad;
      for (const auto& host : preview.next_step()) {
        const auto batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
        const auto hidden = run.model->forward_hidden(batch.input_ids, batch.position_ids, batch.mask, ForwardOptions{});
        const auto logits = run.model->lm_head(hidden).to(at::kFloat).reshape({-1, run.model->config().vocab_size});
        loss_sum += at::cross_entropy_loss(logits, shift_labels(batch.labels).reshape(-1), std::nullopt,
                                           at::Reduction::Sum, kIgnoreIndex)
                        .item<double>();
        tokens += static_cast<double>(host.trainable_tokens);
      }
    }
    const auto result =
        Trainer(*run.model, run.trainable, run.stream, *run.communicator, run.config, run.objective).train({});
    ASSERT_EQ(result.step_losses.size(), 1u);
    EXPECT_NEAR(result.step_losses[0], loss_sum / tokens, 1e-5 * loss_sum / tokens);
  }
}

TEST(Trainer, ASaveHookNeedsACheckpointDirectory) {
  TrainingRun run;
  TrainerHooks hooks;
  hooks.save_checkpoint = [](const std::string&, TrainingState) {};
  Trainer trainer(*run.model, run.trainable, run.stream, *run.communicator, run.config, run.objective);
  EXPECT_THROW(trainer.train(hooks), Error);
}

// Note [Preemption]: a stop asked for during step 2 is agreed on at the next step boundary; the
// run saves the 2 steps done and throws Preempted, and resuming from that state trains what the
// uninterrupted run trains.
TEST(Trainer, AStopRequestSavesTheStepsDoneAndStopsAtTheNextBoundary) {
  TrainingRun stopped;
  int polls = 0;
  std::optional<TrainingState> saved;
  std::vector<at::Tensor> saved_adapter;
  TrainerHooks hooks;
  hooks.checkpoint_dir = [](int64_t step) { return "memory-" + std::to_string(step); };
  hooks.save_checkpoint = [&](const std::string&, TrainingState state) {
    saved = std::move(state);
    saved_adapter = adapter_copy(stopped.trainable);
  };
  hooks.stop_requested = [&] { return ++polls >= 2; };  // polled once per step, in its token count
  Trainer trainer(*stopped.model, stopped.trainable, stopped.stream, *stopped.communicator, stopped.config,
                  stopped.objective);
  std::string message;
  try {
    trainer.train(hooks);
    ADD_FAILURE() << "the run did not stop";
  } catch (const Preempted& e) {
    message = e.what();
  }
  testing::expect_contains(message, {"stopped after step 2 of 4", "saved memory-2", "--resume_from_checkpoint"});
  EXPECT_EQ(polls, 2);  // step 3 never started
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->global_step, 2);

  TrainingRun uninterrupted;
  const auto full = Trainer(*uninterrupted.model, uninterrupted.trainable, uninterrupted.stream,
                            *uninterrupted.communicator, uninterrupted.config, uninterrupted.objective)
                        .train({});
  TrainingRun resumed;
  load_adapter(resumed, saved_adapter);
  Trainer continued(*resumed.model, resumed.trainable, resumed.stream, *resumed.communicator, resumed.config,
                    resumed.objective);
  continued.load_state(*saved);
  const auto rest = continued.train({});
  EXPECT_EQ(rest.step_losses, full.step_losses);
  expect_equal_tensors(adapter_copy(resumed.trainable), adapter_copy(uninterrupted.trainable));
}

}  // namespace
}  // namespace finetune
