// The trainer on Gloo ranks (threads of this process): with balanced step planning
// (data/micro_batch_stream.h) N ranks train what one process with the same global batch trains
// (Note [Global token normalisation] in train/trainer.h), also where the plan gives a rank fewer
// micro-batches than another (its surplus ones are empty, zero-weight).
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "../../ddp/ddp_test_helpers.h"
#include "../../test_support.h"
#include "../trainer_test_model.h"
#include "finetune/train/trainer.h"

namespace finetune {
namespace {

// 24 samples: even ones 3-4 tokens, odd ones 26-30, so the literal rule puts only short samples on
// even ranks of an even world.
std::vector<Sample> uneven_samples() {
  std::vector<int> lengths;
  for (int i = 0; i < 24; ++i) lengths.push_back(i % 2 == 0 ? 3 + i % 2 + (i / 2) % 2 : 26 + (i * 3) % 5);
  return testing::samples_of_lengths(lengths);
}

MicroBatchStreamConfig stream_config(int world, int rank, int64_t batch_size) {
  MicroBatchStreamConfig config;
  config.sampler = {0, world, rank, /*seed=*/3, /*shuffle=*/false, /*drop_last=*/false};
  config.batch_size = batch_size;
  config.gradient_accumulation_steps = 2;
  config.max_seq_length = 32;  // a long sample fills a micro-batch of batch 1 alone
  config.planning = StepPlanning::balanced;
  return config;
}

TrainerConfig trainer_config(const std::string& output_dir) {
  TrainerConfig config;
  config.total_steps = 4;
  config.learning_rate = 5e-2;
  config.gradient_checkpointing = false;
  config.output_dir = output_dir;
  return config;
}

struct Trained {
  std::vector<at::Tensor> adapter;
  std::vector<double> losses;
};

Trained train_once(Communicator& communicator, const std::vector<Sample>& samples, int64_t batch_size) {
  testing::TempDir output("trainer_ranks");
  auto model = testing::tiny_lora_model(/*lora_dropout=*/0.0);
  const NamedTensors trainable = lora_parameters(*model);
  MicroBatchStream stream(samples, stream_config(communicator.world_size(), communicator.rank(), batch_size));
  const CausalLmObjective objective(model->config());
  Trainer trainer(*model, trainable, stream, communicator, trainer_config(output.str()), objective);
  Trained trained;
  trained.losses = trainer.train({}).step_losses;
  for (const auto& [name, tensor] : trainable) trained.adapter.push_back(tensor.detach().clone());
  return trained;
}

double relative_difference(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

TEST(TrainerAcrossRanks, BalancedPlanningTrainsLikeOneProcessWithTheSameGlobalBatch) {
  const auto samples = uneven_samples();
  auto one = make_communicator(LaunchEnv{}, at::kCPU, CommunicatorOptions{});
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    // One process with batch world x 1 sees each step's samples; so do the ranks, planned.
    const Trained reference = train_once(*one, samples, world);
    // The plan does leave some rank with an empty micro-batch in some step.
    bool some_empty = false;
    for (int rank = 0; rank < world; ++rank) {
      MicroBatchStream preview(samples, stream_config(world, rank, 1));
      for (int step = 0; step < 4; ++step) {
        for (const auto& batch : preview.next_step()) some_empty = some_empty || batch.rows == 0;
      }
    }
    EXPECT_TRUE(some_empty);
    std::mutex mutex;
    std::vector<Trained> ranks(static_cast<size_t>(world));
    testing::run_ranks(world, [&](int rank, Communicator& communicator) {
      Trained trained = train_once(communicator, samples, 1);
      std::lock_guard<std::mutex> lock(mutex);
      ranks[static_cast<size_t>(rank)] = std::move(trained);
    }, /*timeout_seconds=*/60);
    for (const auto& trained : ranks) {
      ASSERT_EQ(trained.losses.size(), reference.losses.size());
      for (size_t s = 0; s < reference.losses.size(); ++s) {
        EXPECT_NEAR(trained.losses[s], reference.losses[s], 1e-6 * reference.losses[s]) << "step " << s + 1;
      }
      ASSERT_EQ(trained.adapter.size(), reference.adapter.size());
      for (size_t i = 0; i < reference.adapter.size(); ++i) {
        EXPECT_LE(relative_difference(trained.adapter[i], reference.adapter[i]), 1e-6) << "tensor " << i;
      }
    }
  }
}

}  // namespace
}  // namespace finetune
