// Note [Graphed micro-steps] and Note [Filler pairs] on the GPU for the preference objectives:
// dpo (sigmoid and ipo; the base model or a frozen adapter copy as the reference, or precomputed
// reference log-probs) and orpo micro-steps replayed from CUDA graphs give the loss, every metric
// and the adapter after 3 optimizer steps bit for bit as the same padded micro-steps run eagerly
// (deterministic algorithms on), and as the trainer's unpadded eager micro-steps to bf16 rounding.
// Micro-batches of 3 pairs run in 4 pair slots (one filler pair).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>

#include "finetune/data/batch.h"
#include "finetune/ddp/communicator.h"
#include "finetune/ddp/grad_reducer.h"
#include "finetune/launch/launch_env.h"
#include "finetune/lora/lora_adapter.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/dpo_objective.h"
#include "finetune/train/micro_step.h"
#include "finetune/train/micro_step_graphs.h"
#include "finetune/train/orpo_objective.h"
#include "finetune/train/reference_adapters.h"
#include "random_lora_model.h"

namespace finetune {
namespace {

const at::Device kCuda(at::kCUDA, 0);

// 12 pairs as interleaved rows (chosen, rejected of pair 0, then pair 1, ...): a prompt of 8-27
// tokens (labels -100) shared by both, completions of 5-40 tokens.
std::vector<Sample> pair_rows() {
  std::vector<Sample> rows;
  int32_t next = 5;
  auto token = [&next] { return next = (next * 37 + 11) % 500 + 3; };
  for (int pair = 0; pair < 12; ++pair) {
    std::vector<int32_t> prompt(static_cast<size_t>(8 + (pair * 7) % 20));
    for (auto& id : prompt) id = token();
    for (int member = 0; member < 2; ++member) {
      Sample sample{prompt, std::vector<int32_t>(prompt.size(), kIgnoreIndex)};
      const int completion = 5 + (pair * 13 + member * 17) % 36;
      for (int t = 0; t < completion; ++t) {
        sample.input_ids.push_back(token());
        sample.labels.push_back(sample.input_ids.back());
      }
      rows.push_back(sample);
    }
  }
  return rows;
}

// 3 optimizer steps of 3 micro-batches of 1-3 pairs (by pair index): shapes repeat (replays), 3
// pairs take 4 pair slots (a filler pair).
const std::vector<std::vector<int64_t>> kMicroBatchPairs = {{0}, {1, 2}, {3, 4, 5}, {6},      {7, 8},
                                                            {9, 10, 11}, {2}, {5, 1}, {8, 0, 4}};
constexpr size_t kMicroBatchesPerStep = 3;

// The chosen rows of `pairs`, then their rejected rows (the stream's collation), with the pairs'
// indices as group ids.
HostBatch pair_micro_batch(const std::vector<Sample>& rows, const std::vector<int64_t>& pairs) {
  std::vector<int64_t> indices;
  for (int64_t member = 0; member < 2; ++member) {
    for (int64_t pair : pairs) indices.push_back(2 * pair + member);
  }
  HostBatch batch = collate(rows, indices, /*pad_token_id=*/0);
  batch.group_ids = pairs;
  return batch;
}

// A frozen copy of the model's adapter as it is now (as commands/preference_setup.h's
// frozen_adapter_copy makes one from --init_adapter).
std::unique_ptr<ReferenceAdapters> frozen_copy_of_adapter(CausalLM& model) {
  std::map<std::string, std::unique_ptr<LinearAdapter>> trained;
  for (auto& [name, linear] : model.named_linears()) {
    if (linear->adapter) trained.emplace(name, std::move(linear->adapter));
  }
  attach_lora(model, testing::random_model_lora_config(), testing::kRandomModelLoraSeed);
  std::map<std::string, std::unique_ptr<LinearAdapter>> copy;
  at::NoGradGuard no_grad;
  for (auto& [name, linear] : model.named_linears()) {
    if (!linear->adapter) continue;
    const auto& original = dynamic_cast<const LoraAdapter&>(*trained.at(name));
    auto& fresh = dynamic_cast<LoraAdapter&>(*linear->adapter);
    fresh.lora_A.copy_(original.lora_A);
    fresh.lora_B.copy_(original.lora_B);
    copy.emplace(name, std::move(linear->adapter));
    linear->adapter = std::move(trained.at(name));
  }
  return std::make_unique<ReferenceAdapters>(std::move(copy));
}

enum class Reference { BaseModel, FrozenCopy, Precomputed };

struct Case {
  std::string name;
  std::string test_name;  // gtest's parameter name
  bool orpo = false;
  DpoLossType loss_type = DpoLossType::Sigmoid;
  Reference reference = Reference::BaseModel;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"dpo sigmoid", "DpoSigmoid", false, DpoLossType::Sigmoid, Reference::BaseModel},
      {"dpo sigmoid, precomputed reference", "DpoSigmoidPrecomputed", false, DpoLossType::Sigmoid,
       Reference::Precomputed},
      {"dpo sigmoid, frozen adapter copy", "DpoSigmoidFrozenCopy", false, DpoLossType::Sigmoid, Reference::FrozenCopy},
      {"dpo ipo", "DpoIpo", false, DpoLossType::Ipo, Reference::BaseModel},
      {"dpo ipo, precomputed reference", "DpoIpoPrecomputed", false, DpoLossType::Ipo, Reference::Precomputed},
      {"orpo", "Orpo", true},
  };
  return all;
}

struct Trace {
  std::vector<at::Tensor> losses;   // per micro-step, fp32 scalar
  std::vector<at::Tensor> metrics;  // per micro-step, the metric sums (fp64)
  std::vector<at::Tensor> final_parameters;
  int64_t captured = 0, replays = 0;
};

enum class Mode { EagerUnpadded, PaddedEager, Graphed };

// The micro-steps of the cases' objective, a plain SGD update after each optimizer step (the
// graphs must read the updated adapter in place). EagerUnpadded: the trainer's path without
// graphs; PaddedEager: the graphs' layout run without capture; Graphed: captured and replayed.
Trace train(const Case& c, Mode mode) {
  auto model = testing::random_lora_model(kCuda);
  const std::vector<Sample> rows = pair_rows();
  std::unique_ptr<ReferenceAdapters> reference;
  std::unique_ptr<PairObjective> objective;
  if (c.orpo) {
    objective = std::make_unique<OrpoObjective>(0.1);
  } else {
    DpoLossConfig config;
    config.loss_type = c.loss_type;
    config.beta = 0.1;
    reference = c.reference == Reference::FrozenCopy ? frozen_copy_of_adapter(*model)
                                                     : std::make_unique<ReferenceAdapters>();
    auto dpo = std::make_unique<DpoObjective>(config, *model, *reference);
    if (c.reference == Reference::Precomputed) {
      dpo->precompute_reference(rows, 2, 0, BatchLayout::kFlatRowVariableLength);
    }
    objective = std::move(dpo);
  }
  const NamedTensors trainable = lora_parameters(*model);
  auto communicator = make_communicator(LaunchEnv{}, kCuda, CommunicatorOptions{});
  GradReducer reducer(trainable, *communicator, GradReducerOptions{});
  ForwardOptions forward;
  forward.training = true;
  forward.gradient_checkpointing = true;
  std::unique_ptr<MicroStepGraphs> graphs;
  if (mode != Mode::EagerUnpadded) {
    MicroStepGraphsConfig config;
    config.capture = mode == Mode::Graphed;
    config.eager_warmup = 1;
    graphs = std::make_unique<MicroStepGraphs>(*model, forward, config, *objective);
  }
  Trace trace;
  for (size_t first = 0; first < kMicroBatchPairs.size(); first += kMicroBatchesPerStep) {
    std::vector<HostBatch> batches;
    double pairs = 0;
    for (size_t i = first; i < first + kMicroBatchesPerStep; ++i) {
      batches.push_back(pair_micro_batch(rows, kMicroBatchPairs[i]));
      pairs += objective->normaliser_share(batches.back());
    }
    const auto normaliser = at::full({}, pairs, at::TensorOptions().dtype(at::kFloat).device(kCuda));
    for (size_t i = 0; i < batches.size(); ++i) {
      reducer.prepare_for_backward(i + 1 == batches.size());
      LossAndMetrics out;
      if (graphs) {
        out = graphs->run(batches[i], normaliser, at::Tensor(), reducer);
      } else {
        const DeviceBatch batch = to_device(batches[i], kCuda, BatchLayout::kFlatRowVariableLength);
        out = forward_backward_with_metrics(*model, micro_batch_inputs(batch), forward, *objective, normaliser,
                                            at::Tensor());
      }
      trace.losses.push_back(out.loss_sum.clone());  // a replay's outputs are overwritten by the next
      trace.metrics.push_back(out.metric_sums.clone());
    }
    reducer.finalize();
    at::NoGradGuard no_grad;
    // A small rate: ipo's gradients (the loss starts near (1 / (2 beta))^2 = 25) are large.
    for (const auto& [name, tensor] : trainable) tensor.detach().sub_(tensor.grad() * 0.05);
    reducer.zero_grad();
  }
  for (const auto& [name, tensor] : trainable) trace.final_parameters.push_back(tensor.detach().clone());
  if (graphs) {
    trace.captured = graphs->graphs_captured();
    trace.replays = graphs->replays();
  }
  graphs.reset();
  at::cuda::getCurrentCUDAStream().synchronize();
  return trace;
}

// max |a - b| / max |b|, in double.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.to(at::kDouble).abs().max().item<double>(), 1e-30);
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

class PreferenceMicroStepGraphs : public ::testing::TestWithParam<size_t> {};

TEST_P(PreferenceMicroStepGraphs, ReplaysGiveBitwiseWhatThePaddedEagerStepsGive) {
  const Case& c = cases()[GetParam()];
  // Flash attention's backward and index_add accumulate in a launch-dependent order unless
  // deterministic algorithms are on.
  const bool was_deterministic = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const Trace eager_a = train(c, Mode::PaddedEager);
  const Trace eager_b = train(c, Mode::PaddedEager);
  const Trace graphed = train(c, Mode::Graphed);
  at::globalContext().setDeterministicAlgorithms(was_deterministic, false);

  // Control: the padded eager path repeats itself bit for bit (else the comparison means nothing).
  for (size_t p = 0; p < eager_a.final_parameters.size(); ++p) {
    ASSERT_TRUE(eager_a.final_parameters[p].equal(eager_b.final_parameters[p])) << c.name << " parameter " << p;
  }
  EXPECT_GE(graphed.captured, 3) << c.name;  // 1, 2 and 3 pairs: 1, 2 and 4 pair slots
  EXPECT_EQ(graphed.replays, static_cast<int64_t>(kMicroBatchPairs.size()) - 1) << c.name;  // after 1 warm-up
  for (size_t i = 0; i < graphed.losses.size(); ++i) {
    EXPECT_TRUE(graphed.losses[i].equal(eager_a.losses[i]))
        << c.name << " micro-step " << i << ": " << graphed.losses[i].item<float>() << " vs "
        << eager_a.losses[i].item<float>();
    EXPECT_TRUE(graphed.metrics[i].equal(eager_a.metrics[i])) << c.name << " micro-step " << i << " metrics";
  }
  for (size_t p = 0; p < graphed.final_parameters.size(); ++p) {
    EXPECT_TRUE(graphed.final_parameters[p].equal(eager_a.final_parameters[p])) << c.name << " parameter " << p;
  }
}

// Against the unpadded layout the GEMMs see more rows (filler tokens and targets), and the
// masked sums over pair slots add zeros; hidden states are bf16, so one differently rounded
// element moves a log-prob sum by up to bf16 rounding (2^-8 relative) of its terms. Bounds: the
// existing causal-LM graph test's (loss 1e-2, weights 2e-2 relative); the metrics (sums of
// rewards, log-probs and their differences) are held to 1e-2 of the largest metric of the step.
TEST_P(PreferenceMicroStepGraphs, ReplaysGiveWhatTheUnpaddedEagerStepsGiveToBf16Rounding) {
  const Case& c = cases()[GetParam()];
  const Trace unpadded = train(c, Mode::EagerUnpadded);
  const Trace graphed = train(c, Mode::Graphed);
  double worst_loss = 0, worst_metrics = 0, worst_parameters = 0;
  for (size_t i = 0; i < graphed.losses.size(); ++i) {
    const double loss_error = relative_error(graphed.losses[i], unpadded.losses[i]);
    EXPECT_LE(loss_error, 1e-2) << c.name << " micro-step " << i;
    const double metrics_error = relative_error(graphed.metrics[i], unpadded.metrics[i]);
    EXPECT_LE(metrics_error, 1e-2) << c.name << " micro-step " << i << " metrics";
    worst_loss = std::max(worst_loss, loss_error);
    worst_metrics = std::max(worst_metrics, metrics_error);
  }
  for (size_t p = 0; p < graphed.final_parameters.size(); ++p) {
    const double error = relative_error(graphed.final_parameters[p], unpadded.final_parameters[p]);
    EXPECT_LE(error, 2e-2) << c.name << " parameter " << p;
    worst_parameters = std::max(worst_parameters, error);
  }
  std::printf("[ graphs   ] %s: graphed vs unpadded eager, worst relative: loss %.3g, metrics %.3g, adapter %.3g\n",
              c.name.c_str(), worst_loss, worst_metrics, worst_parameters);
}

INSTANTIATE_TEST_SUITE_P(DpoAndOrpo, PreferenceMicroStepGraphs, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return cases()[info.param].test_name; });

}  // namespace
}  // namespace finetune
