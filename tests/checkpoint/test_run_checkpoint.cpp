// Resumable checkpoints: what is written is read back exactly; only complete checkpoints count;
// pruning keeps the newest; the settings a resume needs are compared; --output_dir reuse rules.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../model/tiny_config.h"
#include "../test_support.h"
#include "finetune/checkpoint/run_checkpoint.h"
#include "finetune/checkpoint/run_directory.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

struct Fixture {
  CausalLM model{tiny_llama_config({16, 8, 12, 1, 2, 1, 4}), at::kFloat, at::kCPU};
  LoraConfig lora;
  NamedTensors trainable;
  Fixture() {
    lora.r = 2;
    lora.target_modules = {"q_proj", "v_proj"};
    trainable = attach_lora(model, lora, 1);
  }
};

RunIdentity identity(const LoraConfig& lora) {
  RunIdentity id;
  id.base_model = "base";
  id.adapter_config = adapter_config_json(lora, "base");
  id.world_size = 2;
  id.per_device_train_batch_size = 3;
  id.gradient_accumulation_steps = 4;
  id.seed = 9;
  return id;
}

TrainingState state_for(const Fixture& f, int64_t step) {
  TrainingState state;
  state.global_step = step;
  state.total_steps = 20;
  state.position = {1, 2};
  state.tokens = 1234;
  for (int64_t i = 0; i < step; ++i) state.step_losses.push_back(1.0 / 3.0 + static_cast<double>(i));
  state.log_history = {{{"step", 2}, {"loss", 0.1}}, {{"step", 4}, {"loss", 0.2}}};
  at::manual_seed(3);
  for (const auto& [name, tensor] : f.trainable) {
    state.exp_avg.push_back(at::randn(tensor.sizes()));
    state.exp_avg_sq.push_back(at::rand(tensor.sizes()));
  }
  state.optimizer_steps = step;
  for (int rank = 0; rank < 2; ++rank) {
    state.cpu_rng_states.push_back(at::randint(0, 255, {40}, at::kByte));
    state.device_rng_states.push_back(at::randint(0, 255, {16}, at::kByte));
  }
  state.identity = identity(f.lora);
  return state;
}

TEST(RunCheckpoint, WhatIsWrittenIsReadBackExactly) {
  Fixture f;
  TempDir root;
  const auto written = state_for(f, 5);
  const auto dir = checkpoint_path(root.str(), 5);
  write_checkpoint(dir, f.model, f.lora, written);
  const auto read = read_training_state(dir, f.trainable);
  EXPECT_EQ(read.global_step, 5);
  EXPECT_EQ(read.total_steps, 20);
  EXPECT_EQ(read.position.epoch, 1);
  EXPECT_EQ(read.position.steps_into_epoch, 2);
  EXPECT_EQ(read.tokens, 1234);
  EXPECT_EQ(read.step_losses, written.step_losses);  // doubles survive the JSON round trip bit for bit
  EXPECT_EQ(read.log_history, written.log_history);
  EXPECT_EQ(read.optimizer_steps, 5);
  ASSERT_EQ(read.exp_avg.size(), f.trainable.size());
  for (size_t i = 0; i < f.trainable.size(); ++i) {
    EXPECT_TRUE(at::equal(read.exp_avg[i], written.exp_avg[i])) << i;
    EXPECT_TRUE(at::equal(read.exp_avg_sq[i], written.exp_avg_sq[i])) << i;
  }
  ASSERT_EQ(read.cpu_rng_states.size(), 2u);
  EXPECT_TRUE(at::equal(read.cpu_rng_states[1], written.cpu_rng_states[1]));
  EXPECT_TRUE(at::equal(read.device_rng_states[0], written.device_rng_states[0]));
  EXPECT_EQ(read.identity.adapter_config, written.identity.adapter_config);
  EXPECT_EQ(read.identity.global_batch(), 24);
  // HF's own fields are there for tools that read trainer_state.json.
  std::ifstream in(dir + "/trainer_state.json");
  const auto hf = nlohmann::json::parse(in);
  EXPECT_EQ(hf.at("global_step"), 5);
  EXPECT_EQ(hf.at("max_steps"), 20);
  EXPECT_EQ(hf.at("log_history").size(), 2u);
}

TEST(RunCheckpoint, OnlyCompleteCheckpointsCountAndPruningKeepsTheNewest) {
  Fixture f;
  TempDir root;
  for (int64_t step : {2, 10, 4}) write_checkpoint(checkpoint_path(root.str(), step), f.model, f.lora, state_for(f, step));
  fs::create_directories(root.file("checkpoint-12"));  // an adapter alone (e.g. another tool's): not resumable
  std::ofstream(root.file("checkpoint-12/adapter_config.json")) << "{}";
  const auto listed = list_checkpoints(root.str());
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed.front().first, 2);
  EXPECT_EQ(listed.back().first, 10);
  EXPECT_EQ(resolve_resume_checkpoint("true", root.str()), checkpoint_path(root.str(), 10));
  EXPECT_EQ(resolve_resume_checkpoint(checkpoint_path(root.str(), 4), root.str()), checkpoint_path(root.str(), 4));
  EXPECT_THROW(resolve_resume_checkpoint(root.file("checkpoint-12"), root.str()), UsageError);
  EXPECT_EQ(prune_checkpoints(root.str(), 0).size(), 0u);
  const auto removed = prune_checkpoints(root.str(), 2);
  EXPECT_EQ(removed, std::vector<std::string>{checkpoint_path(root.str(), 2)});
  EXPECT_EQ(list_checkpoints(root.str()).size(), 2u);
  TempDir empty;
  EXPECT_NE(testing::error_message([&] { resolve_resume_checkpoint("true", empty.str()); }).find("no complete"),
            std::string::npos);
}

TEST(RunCheckpoint, ReadingChecksTheOptimizerAgainstTheAdapter) {
  Fixture f;
  TempDir root;
  const auto dir = checkpoint_path(root.str(), 3);
  write_checkpoint(dir, f.model, f.lora, state_for(f, 3));
  Fixture other;
  LoraConfig bigger = other.lora;
  bigger.r = 4;
  CausalLM model(tiny_llama_config({16, 8, 12, 1, 2, 1, 4}), at::kFloat, at::kCPU);
  const auto trainable = attach_lora(model, bigger, 1);
  const auto message = testing::error_message([&] { read_training_state(dir, trainable); });
  EXPECT_NE(message.find("optimizer.safetensors"), std::string::npos) << message;
}

TEST(RunCheckpoint, ResumeNeedsTheSameModelAdapterGlobalBatchAndSeed) {
  Fixture f;
  const auto saved = identity(f.lora);
  EXPECT_FALSE(check_resume_compatible(saved, saved).has_value());
  auto other_world = saved;  // 2 x 3 x 4 -> 1 x 6 x 4: the same global batch
  other_world.world_size = 1;
  other_world.per_device_train_batch_size = 6;
  const auto notice = check_resume_compatible(saved, other_world);
  ASSERT_TRUE(notice.has_value());
  EXPECT_NE(notice->find("same global batch"), std::string::npos);
  auto expect_refused = [&](RunIdentity current, const std::string& named) {
    const auto message = testing::error_message([&] { check_resume_compatible(saved, current); });
    EXPECT_NE(message.find(named), std::string::npos) << message;
  };
  auto batch = saved;
  batch.gradient_accumulation_steps = 2;
  expect_refused(batch, "global batch");
  auto model = saved;
  model.base_model = "another";
  expect_refused(model, "--model_name");
  auto rank = saved;
  LoraConfig r8 = f.lora;
  r8.r = 8;
  rank.adapter_config = adapter_config_json(r8, "base");
  expect_refused(rank, "adapter r");
  auto dora = saved;
  LoraConfig with_dora = f.lora;
  with_dora.use_dora = true;
  dora.adapter_config = adapter_config_json(with_dora, "base");
  expect_refused(dora, "adapter use_dora");
  auto seed = saved;
  seed.seed = 1;
  expect_refused(seed, "--seed");
}

TEST(RunDirectory, AnotherRunsFilesAreRefusedUnlessOverwritingOrResuming) {
  TempDir root;
  EXPECT_NO_THROW(check_output_dir_reuse(root.file("missing"), false, false));
  std::ofstream(root.file("README.md")) << "mine";  // not a run's file
  EXPECT_NO_THROW(check_output_dir_reuse(root.str(), false, false));
  std::ofstream(root.file("metrics.jsonl")) << "{}";
  fs::create_directories(root.file("checkpoint-3"));
  const auto message = testing::error_message([&] { check_output_dir_reuse(root.str(), false, false); });
  EXPECT_NE(message.find("(metrics.jsonl, checkpoint-3)"), std::string::npos) << message;
  fs::create_directories(root.file("checkpoint-4"));
  fs::create_directories(root.file("checkpoint-5.tmp-123"));  // a dead run's temporary: not counted
  const auto two = testing::error_message([&] { check_output_dir_reuse(root.str(), false, false); });
  EXPECT_NE(two.find("(metrics.jsonl, 2 checkpoint-N directories)"), std::string::npos) << two;
  EXPECT_NE(message.find("--overwrite_output_dir"), std::string::npos) << message;
  EXPECT_NO_THROW(check_output_dir_reuse(root.str(), true, false));
  EXPECT_NO_THROW(check_output_dir_reuse(root.str(), false, true));
  clear_run_artifacts(root.str());
  EXPECT_TRUE(run_artifacts(root.str()).empty());
  fs::remove(root.file("checkpoint-5.tmp-123"));
  EXPECT_TRUE(fs::exists(root.file("README.md")));
}

}  // namespace
}  // namespace finetune
