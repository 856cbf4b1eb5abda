// Note [Graphed micro-steps] on the GPU: replaying captured micro-steps trains bitwise what the
// same padded micro-steps compute eagerly, and the padded micro-steps train what the unpadded
// eager path trains (to bf16 rounding).
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>

#include "finetune/data/batch.h"
#include "finetune/ddp/communicator.h"
#include "finetune/ddp/grad_reducer.h"
#include "finetune/launch/launch_env.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/loss.h"
#include "finetune/train/micro_step_graphs.h"
#include "finetune/train/objective.h"
#include "graph_test_batches.h"
#include "nccl_ranks.h"
#include "random_lora_model.h"

namespace finetune {
namespace {

const at::Device kCuda(at::kCUDA, 0);

struct Trace {
  std::vector<at::Tensor> losses;  // per micro-step, fp32
  std::vector<at::Tensor> grads;   // per optimizer step, all LoRA gradients flattened (fp32)
  std::vector<at::Tensor> final_parameters;
  int64_t captured = 0, replays = 0;
};

// Two optimizer steps of 4 micro-steps each, a plain SGD update in between (the graphs must read
// the updated adapter in place). mode: 0 eager unpadded (the trainer's path without graphs),
// 1 padded eagerly, 2 padded through graphs, 3 through graphs captured ahead (Note [Capture
// ahead]) right after the eager warm-up micro-step, in the middle of the first step. `offload`:
// the graphs' checkpointed inputs in their host arena (Note [Offload arena]); `cache_operands`
// false: the adapters' half-precision operands split per use (Note [Operands split per use]);
// `projections_4bit`: QLoRA, the base projections in NF4 (dequantized in every forward and backward).
Trace train(int mode, bool offload = false, bool cache_operands = true, bool projections_4bit = false) {
  auto model = testing::random_lora_model(kCuda, projections_4bit);
  set_lora_operand_cache(*model, cache_operands);
  const NamedTensors trainable = lora_parameters(*model);
  auto communicator = make_communicator(LaunchEnv{}, kCuda, CommunicatorOptions{});
  GradReducer reducer(trainable, *communicator, GradReducerOptions{});
  ForwardOptions forward;
  forward.training = true;
  forward.gradient_checkpointing = true;
  const CausalLmObjective objective(model->config());
  std::unique_ptr<MicroStepGraphs> graphs;
  if (mode > 0) {
    MicroStepGraphsConfig config;
    config.capture = mode >= 2;
    config.eager_warmup = 1;
    config.offload_activations = offload;
    graphs = std::make_unique<MicroStepGraphs>(*model, forward, config, objective);
  }
  const auto batches = testing::graph_test_micro_batches();
  Trace trace;
  for (size_t step = 0; step < 2; ++step) {
    double tokens = 0;
    for (size_t i = 0; i < 4; ++i) tokens += static_cast<double>(batches[step * 4 + i].trainable_tokens);
    const auto global_tokens = at::full({}, tokens, at::TensorOptions().dtype(at::kFloat).device(kCuda));
    for (size_t i = 0; i < 4; ++i) {
      const HostBatch& host = batches[step * 4 + i];
      reducer.prepare_for_backward(i == 3);
      at::Tensor loss;
      if (graphs) {
        loss = graphs->run(host, global_tokens, at::Tensor(), reducer).loss_sum.clone();
      } else {
        const auto batch = to_device(host, kCuda, BatchLayout::kFlatRowVariableLength);
        auto hidden = model->forward_hidden(batch.input_ids, batch.position_ids, batch.mask, forward);
        loss = causal_lm_loss_sum(*model, hidden, batch.target_positions, batch.target_ids);
        (loss / global_tokens).backward();
        loss = loss.detach();
      }
      trace.losses.push_back(loss.to(at::kFloat));
      if (mode == 3 && step == 0 && i == 0) {
        EXPECT_TRUE(graphs->warmed_up());
        for (const HostBatch& coming : batches) graphs->capture_ahead(coming, at::Tensor(), reducer);
        EXPECT_EQ(graphs->graphs_captured(), 3);
        EXPECT_EQ(graphs->replays(), 0);
      }
    }
    reducer.finalize();
    std::vector<at::Tensor> flat;
    for (const auto& [name, tensor] : trainable) flat.push_back(tensor.grad().reshape({-1}).to(at::kFloat));
    trace.grads.push_back(at::cat(flat));
    at::NoGradGuard no_grad;
    for (const auto& [name, tensor] : trainable) tensor.detach().sub_(tensor.grad() * 0.5);
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

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

TEST(MicroStepGraphs, ReplaysTrainBitwiseWhatThePaddedEagerStepsTrain) {
  // Flash attention's backward and the index_add of the loss accumulate in a launch-dependent
  // order unless deterministic algorithms are on.
  const bool was_deterministic = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const Trace eager_a = train(1);
  const Trace eager_b = train(1);
  const Trace graphed = train(2);
  const Trace captured_ahead = train(3);
  at::globalContext().setDeterministicAlgorithms(was_deterministic, false);

  // Control: the padded eager path repeats itself bit for bit (else the comparison means nothing).
  for (size_t s = 0; s < eager_a.grads.size(); ++s) ASSERT_TRUE(eager_a.grads[s].equal(eager_b.grads[s])) << s;
  // The 8 micro-batches pad to 3 shapes (tokens, targets, samples): {40} {64} {60} {30,20}
  // {33,17} -> 64/64/8, {100} {128} -> 128/128/8, {90} -> 128/64/8 ({64} and {128} without a filler).
  EXPECT_EQ(graphed.captured, 3);
  EXPECT_EQ(graphed.replays, 7);  // every micro-step after the one eager warm-up
  for (size_t i = 0; i < graphed.losses.size(); ++i) {
    EXPECT_TRUE(graphed.losses[i].equal(eager_a.losses[i])) << "micro-step " << i << ": " << graphed.losses[i].item<float>()
                                                             << " vs " << eager_a.losses[i].item<float>();
  }
  for (size_t s = 0; s < graphed.grads.size(); ++s) {
    EXPECT_TRUE(graphed.grads[s].equal(eager_a.grads[s])) << "step " << s << ": relative error "
                                                          << relative_error(graphed.grads[s], eager_a.grads[s]);
  }
  for (size_t p = 0; p < graphed.final_parameters.size(); ++p) {
    EXPECT_TRUE(graphed.final_parameters[p].equal(eager_a.final_parameters[p])) << "parameter " << p;
  }
  // Captured ahead: the same 3 graphs, all before their first replay; the capture ran no kernels,
  // so the first step's gradients (half accumulated when it happened) are untouched.
  EXPECT_EQ(captured_ahead.captured, 3);
  EXPECT_EQ(captured_ahead.replays, 7);
  for (size_t i = 0; i < captured_ahead.losses.size(); ++i) {
    EXPECT_TRUE(captured_ahead.losses[i].equal(eager_a.losses[i])) << "micro-step " << i;
  }
  for (size_t s = 0; s < captured_ahead.grads.size(); ++s) {
    EXPECT_TRUE(captured_ahead.grads[s].equal(eager_a.grads[s])) << "step " << s;
  }
  for (size_t p = 0; p < captured_ahead.final_parameters.size(); ++p) {
    EXPECT_TRUE(captured_ahead.final_parameters[p].equal(eager_a.final_parameters[p])) << "parameter " << p;
  }
}

// The memory options change where tensors wait, not what is computed: graphs whose checkpointed
// inputs go to the host arena and back, whose adapters split their operands in every forward, or
// both (captured ahead), train bitwise what the padded eager steps train.
TEST(MicroStepGraphs, OffloadedInputsAndOperandsSplitPerUseReplayBitwise) {
  const bool was_deterministic = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const Trace eager = train(1);
  const Trace offloaded = train(2, /*offload=*/true);
  const Trace per_use = train(2, /*offload=*/false, /*cache_operands=*/false);
  const Trace both_ahead = train(3, /*offload=*/true, /*cache_operands=*/false);
  at::globalContext().setDeterministicAlgorithms(was_deterministic, false);
  for (const Trace* run : {&offloaded, &per_use, &both_ahead}) {
    EXPECT_EQ(run->captured, 3);
    EXPECT_EQ(run->replays, 7);
    for (size_t i = 0; i < run->losses.size(); ++i) EXPECT_TRUE(run->losses[i].equal(eager.losses[i])) << i;
    for (size_t s = 0; s < run->grads.size(); ++s) {
      EXPECT_TRUE(run->grads[s].equal(eager.grads[s])) << "step " << s << ": relative error "
                                                        << relative_error(run->grads[s], eager.grads[s]);
    }
    for (size_t p = 0; p < run->final_parameters.size(); ++p) {
      EXPECT_TRUE(run->final_parameters[p].equal(eager.final_parameters[p])) << "parameter " << p;
    }
  }
}

// QLoRA: the 4-bit projections' dequantization is captured with the rest (fresh dense weights from
// the graph's pool in every replay), offloaded as the 8B QLoRA seed setting runs by default, and
// the replays train bitwise what the padded eager steps train.
TEST(MicroStepGraphs, QloraReplaysTrainBitwiseWhatThePaddedEagerStepsTrain) {
  const bool was_deterministic = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const Trace eager_a = train(1, false, true, /*projections_4bit=*/true);
  const Trace eager_b = train(1, false, true, /*projections_4bit=*/true);
  const Trace graphed = train(2, false, true, /*projections_4bit=*/true);
  const Trace offloaded_ahead = train(3, /*offload=*/true, true, /*projections_4bit=*/true);
  at::globalContext().setDeterministicAlgorithms(was_deterministic, false);
  for (size_t s = 0; s < eager_a.grads.size(); ++s) ASSERT_TRUE(eager_a.grads[s].equal(eager_b.grads[s])) << s;
  for (const Trace* run : {&graphed, &offloaded_ahead}) {
    EXPECT_EQ(run->captured, 3);
    EXPECT_EQ(run->replays, 7);
    for (size_t i = 0; i < run->losses.size(); ++i) EXPECT_TRUE(run->losses[i].equal(eager_a.losses[i])) << i;
    for (size_t s = 0; s < run->grads.size(); ++s) {
      EXPECT_TRUE(run->grads[s].equal(eager_a.grads[s])) << "step " << s << ": relative error "
                                                          << relative_error(run->grads[s], eager_a.grads[s]);
    }
    for (size_t p = 0; p < run->final_parameters.size(); ++p) {
      EXPECT_TRUE(run->final_parameters[p].equal(eager_a.final_parameters[p])) << "parameter " << p;
    }
  }
}

// Two optimizer steps of 4 micro-steps on `rank` of an NCCL world, the reducer's buckets small (a
// dozen here) so that a replay completes them one after another; rank 1 runs each step's
// micro-batches in reverse order. mode: 1 padded eagerly (the hooks launch each bucket during the
// backward), 2 through graphs with the buckets' all-reduces after their events in the replay
// (Note [Bucket all-reduces during a replay] in ddp/grad_reducer.h), 3 through graphs with them
// all after the replay. Returns each step's reduced gradients, flattened (fp32).
std::vector<at::Tensor> train_rank(int rank, Communicator& communicator, int mode, size_t* buckets = nullptr) {
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
  auto model = testing::random_lora_model(device);
  const NamedTensors trainable = lora_parameters(*model);
  GradReducerOptions options;
  options.first_bucket_bytes = 4096;
  options.bucket_cap_bytes = 16384;
  GradReducer reducer(trainable, communicator, options);
  if (buckets != nullptr) *buckets = reducer.buckets().size();
  ForwardOptions forward;
  forward.training = true;
  forward.gradient_checkpointing = true;
  const CausalLmObjective objective(model->config());
  MicroStepGraphsConfig config;
  config.capture = mode >= 2;
  config.eager_warmup = 1;
  config.overlap_all_reduce = mode == 2;
  MicroStepGraphs graphs(*model, forward, config, objective);
  const auto batches = testing::graph_test_micro_batches();
  std::vector<at::Tensor> grads;
  for (size_t step = 0; step < 2; ++step) {
    const auto global_tokens = at::full({}, 400.0, at::TensorOptions().dtype(at::kFloat).device(device));
    for (size_t i = 0; i < 4; ++i) {
      const HostBatch& host = batches[step * 4 + (rank % 2 == 0 ? i : 3 - i)];
      reducer.prepare_for_backward(i == 3);
      graphs.run(host, global_tokens, at::Tensor(), reducer);
    }
    reducer.finalize();
    std::vector<at::Tensor> flat;
    for (const auto& [name, tensor] : trainable) flat.push_back(tensor.grad().reshape({-1}).to(at::kFloat));
    grads.push_back(at::cat(flat));
    at::NoGradGuard no_grad;
    for (const auto& [name, tensor] : trainable) tensor.detach().sub_(tensor.grad() * 0.5);
    reducer.zero_grad();
  }
  at::cuda::getCurrentCUDAStream().synchronize();
  return grads;
}

// Every visible GPU a rank (one included: Note [NCCL test world]). The all-reduces launched midway
// through the replays sum bitwise what the eager hooks' all-reduces and the after-replay ones sum.
TEST(MicroStepGraphs, BucketAllReducesDuringTheReplaySumBitwiseWhatTheEagerStepsSum) {
  const bool was_deterministic = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  cuda_testing::run_nccl_ranks(cuda_testing::visible_gpus(), [&](int rank, Communicator& communicator) {
    size_t buckets = 0;
    const auto eager = train_rank(rank, communicator, 1, &buckets);
    const auto overlapped = train_rank(rank, communicator, 2);
    const auto after_replay = train_rank(rank, communicator, 3);
    EXPECT_GE(buckets, 8u);
    for (size_t s = 0; s < eager.size(); ++s) {
      EXPECT_TRUE(overlapped[s].equal(eager[s])) << "rank " << rank << ", step " << s << ": relative error "
                                                 << relative_error(overlapped[s], eager[s]);
      EXPECT_TRUE(after_replay[s].equal(eager[s])) << "rank " << rank << ", step " << s;
    }
  });
  at::globalContext().setDeterministicAlgorithms(was_deterministic, false);
}

TEST(MicroStepGraphs, PaddedStepsTrainWhatUnpaddedStepsTrainToBf16Rounding) {
  const Trace unpadded = train(0);
  const Trace graphed = train(2);
  for (size_t i = 0; i < graphed.losses.size(); ++i) {
    // Each loss is a sum of ~50 token losses of ~6.2 computed from bf16 hidden states.
    EXPECT_LE(relative_error(graphed.losses[i], unpadded.losses[i]), 1e-2) << "micro-step " << i;
  }
  for (size_t s = 0; s < graphed.grads.size(); ++s) {
    const double error = relative_error(graphed.grads[s], unpadded.grads[s]);
    std::cout << "step " << s << ": graphed vs unpadded gradient relative error " << error << "\n";
    EXPECT_LE(error, 2e-2) << "step " << s;
  }
}

}  // namespace
}  // namespace finetune
