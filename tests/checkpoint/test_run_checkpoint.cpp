// Resumable checkpoints: what is written is read back exactly; only complete checkpoints (and
// --save_only_model ones, which do not resume) count; pruning keeps the newest (and the best); the
// settings a resume needs are compared; --output_dir reuse rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "../model/tiny_config.h"
#include "../test_support.h"
#include "finetune/checkpoint/run_checkpoint.h"
#include "finetune/checkpoint/run_directory.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/train/adamw_8bit.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

struct Fixture {
  CausalLM model;
  LoraConfig lora;
  NamedTensors trainable;
  explicit Fixture(const TinyShape& shape = {16, 8, 12, 1, 2, 1, 4}) : model(tiny_llama_config(shape), at::kFloat, at::kCPU) {
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
  MicroBatchStreamConfig stream;
  stream.max_seq_length = 512;
  stream.packing = true;
  stream.sampler.shuffle = false;
  id.data = data_identity("train.jsonl", {{{1, 2, 3}, {-100, 2, 3}}, {{4, 5}, {4, 5}}}, stream);
  return id;
}

// Random optimizer state of `optimizer`'s layout for the fixture's adapter.
OptimizerState optimizer_state_for(const Fixture& f, const std::string& optimizer, int64_t step) {
  OptimizerState state;
  state.optimizer = optimizer;
  state.steps = step;
  for (const auto& [name, tensor] : f.trainable) {
    ParameterState tensors;
    for (const auto& spec : optimizer_state_layout(optimizer, tensor)) {
      tensors.emplace_back(spec.field, spec.dtype == at::kByte ? at::randint(0, 256, spec.shape, at::kByte)
                                                               : at::rand(spec.shape).to(spec.dtype));
    }
    state.parameters.push_back(tensors);
  }
  return state;
}

TrainingState state_for(const Fixture& f, int64_t step, const std::string& optimizer = "adamw_torch") {
  TrainingState state;
  state.global_step = step;
  state.total_steps = 20;
  state.position = {1, 2};
  state.metrics.tokens = 1234;
  for (int64_t i = 0; i < step; ++i) state.metrics.step_losses.push_back(1.0 / 3.0 + static_cast<double>(i));
  state.metrics.log_history = {{{"step", 2}, {"loss", 0.1}}, {{"step", 4}, {"loss", 0.2}}};
  at::manual_seed(3);
  state.optimizer = optimizer_state_for(f, optimizer, step);
  for (int rank = 0; rank < 2; ++rank) {
    state.generators.push_back({at::randint(0, 255, {40}, at::kByte), at::randint(0, 255, {16}, at::kByte)});
  }
  state.identity = identity(f.lora);
  state.identity.optim = optimizer;
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
  EXPECT_EQ(read.metrics.tokens, 1234);
  EXPECT_EQ(read.metrics.step_losses, written.metrics.step_losses);  // doubles survive the JSON round trip bit for bit
  EXPECT_EQ(read.metrics.log_history, written.metrics.log_history);
  EXPECT_EQ(read.optimizer.optimizer, "adamw_torch");
  EXPECT_EQ(read.optimizer.steps, 5);
  ASSERT_EQ(read.optimizer.parameters.size(), f.trainable.size());
  for (size_t i = 0; i < f.trainable.size(); ++i) {
    ASSERT_EQ(read.optimizer.parameters[i].size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(read.optimizer.parameters[i][k].first, written.optimizer.parameters[i][k].first);
      EXPECT_TRUE(at::equal(read.optimizer.parameters[i][k].second, written.optimizer.parameters[i][k].second)) << i;
    }
  }
  ASSERT_EQ(read.generators.size(), 2u);
  EXPECT_TRUE(at::equal(read.generators[1].cpu, written.generators[1].cpu));
  EXPECT_TRUE(at::equal(read.generators[0].device, written.generators[0].device));
  EXPECT_EQ(read.identity.adapter_config, written.identity.adapter_config);
  ASSERT_TRUE(read.identity.data.has_value());
  EXPECT_EQ(read.identity.data->samples_fingerprint, written.identity.data->samples_fingerprint);
  EXPECT_EQ(read.identity.data->dataset, "train.jsonl");
  EXPECT_EQ(read.identity.data->max_seq_length, 512);
  EXPECT_TRUE(read.identity.data->packing);
  EXPECT_FALSE(read.identity.data->shuffle);
  EXPECT_EQ(read.identity.global_batch(), 24);
  // HF's own fields are there for tools that read trainer_state.json.
  std::ifstream in(dir + "/trainer_state.json");
  const auto hf = nlohmann::json::parse(in);
  EXPECT_EQ(hf.at("global_step"), 5);
  EXPECT_EQ(hf.at("max_steps"), 20);
  EXPECT_EQ(hf.at("log_history").size(), 2u);
}

// 8-bit AdamW's state (codes and absmax of the large tensors, fp32 moments of the small) is
// written and read back exactly, and only into a run with the same --optim.
TEST(RunCheckpoint, EightBitOptimizerStateIsReadBackExactly) {
  // hidden 2048: lora_A (2, 2048) has 4096 elements (8-bit state), lora_B (64 or 128, 2) fp32 state.
  const Fixture large({16, 2048, 12, 1, 2, 1, 64});
  TempDir root;
  const auto written = state_for(large, 4, kAdamW8bitName);
  int64_t eight_bit = 0;
  for (const auto& tensors : written.optimizer.parameters) eight_bit += tensors.size() == 4;
  ASSERT_GT(eight_bit, 0);
  ASSERT_LT(eight_bit, static_cast<int64_t>(written.optimizer.parameters.size()));
  const auto dir = checkpoint_path(root.str(), 4);
  write_checkpoint(dir, large.model, large.lora, written);
  EXPECT_EQ(read_run_identity(dir).optim, kAdamW8bitName);
  const auto read = read_training_state(dir, large.trainable);
  EXPECT_EQ(read.optimizer.optimizer, kAdamW8bitName);
  EXPECT_EQ(read.optimizer.steps, 4);
  ASSERT_EQ(read.optimizer.parameters.size(), written.optimizer.parameters.size());
  for (size_t i = 0; i < read.optimizer.parameters.size(); ++i) {
    ASSERT_EQ(read.optimizer.parameters[i].size(), written.optimizer.parameters[i].size());
    for (size_t k = 0; k < read.optimizer.parameters[i].size(); ++k) {
      const auto& [field, tensor] = read.optimizer.parameters[i][k];
      EXPECT_EQ(field, written.optimizer.parameters[i][k].first);
      EXPECT_EQ(tensor.scalar_type(), written.optimizer.parameters[i][k].second.scalar_type());
      EXPECT_TRUE(at::equal(tensor, written.optimizer.parameters[i][k].second)) << field << " " << i;
    }
  }
  // The other optimizer's checkpoint is refused before anything is loaded, naming the file.
  auto torch_run = identity(large.lora);
  const auto message = testing::error_message([&] { check_resume_compatible(read_run_identity(dir), torch_run); });
  EXPECT_NE(message.find("optimizer.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("--optim adamw_8bit"), std::string::npos) << message;
  EXPECT_NE(message.find("--optim adamw_torch"), std::string::npos) << message;
  auto eight_bit_run = torch_run;
  eight_bit_run.optim = kAdamW8bitName;
  const auto reverse_dir = checkpoint_path(root.str(), 2);
  write_checkpoint(reverse_dir, large.model, large.lora, state_for(large, 2));
  EXPECT_THROW(check_resume_compatible(read_run_identity(reverse_dir), eight_bit_run), UsageError);
}

// Checkpoints written before --optim had a choice name no optimizer: they hold torch's AdamW
// state. A file whose optimizer disagrees with its trainer_state.json is refused, naming it.
TEST(RunCheckpoint, CheckpointsWithoutAnOptimizerNameAreTorchAdamWs) {
  Fixture f;
  TempDir root;
  const auto dir = checkpoint_path(root.str(), 3);
  const auto written = state_for(f, 3);
  write_checkpoint(dir, f.model, f.lora, written);
  auto document = nlohmann::json::parse(std::ifstream(dir + "/trainer_state.json"));
  document["finetune"]["run"].erase("optim");
  std::ofstream(dir + "/trainer_state.json") << document.dump();
  const auto tensors = load_tensors(dir + "/optimizer.safetensors");
  save_tensors(dir + "/optimizer.safetensors", {tensors.begin(), tensors.end()}, {{"step", "3"}});
  EXPECT_EQ(read_run_identity(dir).optim, "adamw_torch");
  const auto read = read_training_state(dir, f.trainable);
  EXPECT_EQ(read.optimizer.optimizer, "adamw_torch");
  EXPECT_TRUE(at::equal(read.optimizer.parameters[0][0].second, written.optimizer.parameters[0][0].second));

  save_tensors(dir + "/optimizer.safetensors", {tensors.begin(), tensors.end()},
               {{"step", "3"}, {"optimizer", "adamw_8bit"}});
  const auto message = testing::error_message([&] { read_training_state(dir, f.trainable); });
  EXPECT_NE(message.find("optimizer.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("adamw_8bit"), std::string::npos) << message;
}

// An fp16 run's loss scale and growth tracker come back exactly; a bf16 run's checkpoint (and
// every older one) has none and still loads; one field without the other is refused.
TEST(RunCheckpoint, LossScaleIsKeptForFp16RunsOnly) {
  Fixture f;
  TempDir root;
  auto fp16 = state_for(f, 3);
  fp16.loss_scaler = LossScalerState{2048.0, 1999};
  const auto dir = checkpoint_path(root.str(), 3);
  write_checkpoint(dir, f.model, f.lora, fp16);
  const auto read = read_training_state(dir, f.trainable);
  ASSERT_TRUE(read.loss_scaler.has_value());
  EXPECT_EQ(read.loss_scaler->scale, 2048.0);
  EXPECT_EQ(read.loss_scaler->growth_tracker, 1999);
  auto document = nlohmann::json::parse(std::ifstream(dir + "/trainer_state.json"));
  EXPECT_EQ(document.at("finetune").at("loss_scale"), 2048.0);
  EXPECT_EQ(document.at("finetune").at("loss_scale_growth_tracker"), 1999);

  const auto bf16_dir = checkpoint_path(root.str(), 4);
  write_checkpoint(bf16_dir, f.model, f.lora, state_for(f, 4));
  const auto bf16_document = nlohmann::json::parse(std::ifstream(bf16_dir + "/trainer_state.json"));
  EXPECT_FALSE(bf16_document.at("finetune").contains("loss_scale"));
  EXPECT_FALSE(read_training_state(bf16_dir, f.trainable).loss_scaler.has_value());

  document["finetune"].erase("loss_scale_growth_tracker");
  std::ofstream(dir + "/trainer_state.json") << document.dump();
  const auto message = testing::error_message([&] { read_training_state(dir, f.trainable); });
  EXPECT_NE(message.find("loss_scale_growth_tracker"), std::string::npos) << message;
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
  EXPECT_TRUE(check_resume_compatible(saved, saved).empty());
  auto other_world = saved;  // 2 x 3 x 4 -> 1 x 6 x 4: the same global batch
  other_world.world_size = 1;
  other_world.per_device_train_batch_size = 6;
  const auto notices = check_resume_compatible(saved, other_world);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("same global batch"), std::string::npos);
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

// Note [Resume identity]: the settings that decide where a data position points, and the data.
TEST(RunCheckpoint, ResumeNeedsTheSameDataAndDataOrder) {
  Fixture f;
  const auto saved = identity(f.lora);
  auto expect_refused = [&](const std::function<void(DataIdentity&)>& change, const std::string& named) {
    auto current = saved;
    change(*current.data);
    const auto message = testing::error_message([&] { check_resume_compatible(saved, current); });
    EXPECT_NE(message.find(named), std::string::npos) << message;
  };
  expect_refused([](DataIdentity& d) { d.max_seq_length = 1024; }, "--max_seq_length 512, this run has 1024");
  expect_refused([](DataIdentity& d) { d.packing = false; }, "--packing true, this run has false");
  expect_refused([](DataIdentity& d) { d.group_by_length = true; }, "--group_by_length false, this run has true");
  expect_refused([](DataIdentity& d) { d.shuffle = true; }, "--shuffle false, this run has true");
  expect_refused([](DataIdentity& d) { d.samples_fingerprint = samples_fingerprint({{{1, 2, 4}, {-100, 2, 4}}}); },
                 "the training data (--dataset) train.jsonl (2 tokenized samples, fingerprint ");
  auto moved = saved;  // the same data under another path resumes
  moved.data->dataset = "/elsewhere/train.jsonl";
  EXPECT_TRUE(check_resume_compatible(saved, moved).empty());
  // A checkpoint written before the data was recorded resumes, with a notice.
  auto older = saved;
  older.data.reset();
  const auto notices = check_resume_compatible(older, saved);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("predates"), std::string::npos) << notices[0];
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

namespace finetune {
namespace {

// --save_only_model (HF's save_only_model): the adapter and trainer_state.json only; listed and
// pruned like the others, refused by --resume_from_checkpoint with the reason.
TEST(RunCheckpoint, ModelOnlyCheckpointsCountButDoNotResume) {
  Fixture f;
  TempDir root;
  auto state = state_for(f, 2);
  state.best_metric = 1.25;
  state.best_model_checkpoint = checkpoint_path(root.str(), 2);
  write_checkpoint(checkpoint_path(root.str(), 2), f.model, f.lora, state, /*model_only=*/true);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(checkpoint_path(root.str(), 2))) files.push_back(entry.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors", "trainer_state.json"}));
  EXPECT_EQ(list_checkpoints(root.str()).size(), 1u);
  testing::expect_contains(testing::error_message([&] { resolve_resume_checkpoint("true", root.str()); }),
                           {"written with --save_only_model", "cannot resume"});
  // HF's trainer_state.json fields.
  std::ifstream in(checkpoint_path(root.str(), 2) + "/trainer_state.json");
  const auto document = nlohmann::json::parse(in);
  EXPECT_EQ(document.at("best_metric").get<double>(), 1.25);
  EXPECT_EQ(document.at("best_model_checkpoint").get<std::string>(), checkpoint_path(root.str(), 2));
}

// HF's _rotate_checkpoints with a best model: the best checkpoint is kept as the second newest,
// and a limit of 1 keeps 2 while the best is not the newest.
TEST(RunCheckpoint, PruningKeepsTheBestCheckpointAsHfDoes) {
  Fixture f;
  TempDir root;
  for (int64_t step : {1, 2, 3, 4, 5}) {
    write_checkpoint(checkpoint_path(root.str(), step), f.model, f.lora, state_for(f, step), /*model_only=*/true);
  }
  const auto best = checkpoint_path(root.str(), 2);
  EXPECT_EQ(prune_checkpoints(root.str(), 2, best),
            (std::vector<std::string>{checkpoint_path(root.str(), 1), checkpoint_path(root.str(), 3),
                                      checkpoint_path(root.str(), 4)}));
  EXPECT_EQ(prune_checkpoints(root.str(), 1, best), std::vector<std::string>{});  // limit 1 keeps best + newest
  const auto kept = list_checkpoints(root.str());
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, 2);
  EXPECT_EQ(kept[1].first, 5);
  // The best being the newest: the plain rule.
  EXPECT_EQ(prune_checkpoints(root.str(), 1, checkpoint_path(root.str(), 5)),
            std::vector<std::string>{checkpoint_path(root.str(), 2)});
}

}  // namespace
}  // namespace finetune
