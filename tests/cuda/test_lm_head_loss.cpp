// The LM head loss in vocabulary tiles (train/loss.h: LmHeadLoss::vocab_tiles, Note [Vocabulary-
// tiled LM head loss]) on the GPU, at Qwen3's vocabulary (151,936) in bf16, as training runs it
// (the tiles' fused kernel; tests/cuda/test_fused_vocab_tile.cpp compares it with the composition):
//  - its distance to the fp32 arithmetic on the same bf16 head and hidden states is no larger than
//    the row-chunk path's (loss and hidden-state gradient);
//  - its device memory beyond the inputs stays under 128 MiB at 2,048 trained positions x 4,096
//    hidden (a tile's ~64 MiB working set, plus the gathered rows and their saved gradient, 32 MiB
//    at this shape, which both paths hold), where the row chunks take over 300 MiB (the seed
//    setting's peak is inside this loss);
//  - captured in a CUDA graph (as a graphed micro-step captures it), a replay gives the eager
//    loss and gradient bit for bit.
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <iostream>
#include <utility>

#include "finetune/train/loss.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

constexpr int64_t kQwenVocab = 151936;

struct HeadCase {
  OutputHead head;
  at::Tensor hidden;  // (1, N, C) bf16
  TokenTargets targets;
};

HeadCase qwen_shaped_case(int64_t count, int64_t hidden_size, uint64_t seed) {
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(seed);
  const auto options = at::TensorOptions().device(cuda);
  HeadCase c;
  c.head.weight = (at::randn({kQwenVocab, hidden_size}, options) * 0.02).to(at::kBFloat16);
  c.hidden = (at::randn({1, count, hidden_size}, options) * 2).to(at::kBFloat16);
  c.targets.positions = at::arange(count, options.dtype(at::kLong));
  c.targets.ids = at::randint(0, kQwenVocab, {count}, options.dtype(at::kLong));
  c.targets.weights = at::ones({count}, options.dtype(at::kFloat));
  c.targets.weights.narrow(0, count - 7, 7).zero_();  // filler rows, as a graph pads them
  return c;
}

// The loss and the gradient of the hidden states, in fp32.
std::pair<double, at::Tensor> loss_and_grad(const OutputHead& head, const at::Tensor& hidden,
                                            const TokenTargets& targets, LmHeadLoss tiling) {
  auto leaf = hidden.detach().clone().requires_grad_(true);
  auto loss = output_head_loss_sum(head, leaf, targets, {tiling, /*fp32_output_gemm=*/true});
  loss.backward();
  return {loss.item<double>(), leaf.grad().to(at::kFloat)};
}

int64_t allocated_bytes() { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current; }
int64_t peak_bytes() { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak; }

TEST(LmHeadLossCuda, VocabTilesAreAsCloseToFp32AsRowChunks) {
  const auto c = qwen_shaped_case(1100, 1024, 3);  // row tiles of 512, 512, 76
  OutputHead head32{c.head.weight.to(at::kFloat), std::nullopt};
  const auto [loss32, grad32] = loss_and_grad(head32, c.hidden.to(at::kFloat), c.targets, LmHeadLoss::row_chunks);
  const auto [tiled_loss, tiled_grad] = loss_and_grad(c.head, c.hidden, c.targets, LmHeadLoss::vocab_tiles);
  const auto [chunked_loss, chunked_grad] = loss_and_grad(c.head, c.hidden, c.targets, LmHeadLoss::row_chunks);
  const double tiled_distance = ((tiled_grad - grad32).norm() / grad32.norm()).item<double>();
  const double chunked_distance = ((chunked_grad - grad32).norm() / grad32.norm()).item<double>();
  std::cout << "grad distance to fp32: vocab tiles " << tiled_distance << ", row chunks " << chunked_distance
            << "; loss distance: " << std::abs(tiled_loss - loss32) << ", " << std::abs(chunked_loss - loss32)
            << " (of " << loss32 << ")" << std::endl;
  EXPECT_GT(chunked_distance, 0.0);
  EXPECT_LE(tiled_distance, chunked_distance);
  EXPECT_LE(std::abs(tiled_loss - loss32), std::abs(chunked_loss - loss32) + 1e-6 * loss32);
  EXPECT_EQ(tiled_grad.narrow(1, 1100 - 7, 7).abs().max().item<double>(), 0.0);  // filler rows
}

TEST(LmHeadLossCuda, VocabTilesKeepTheTransientUnder128Mib) {
  const auto c = qwen_shaped_case(2048, 4096, 4);
  const auto peak_above_inputs = [&](LmHeadLoss tiling) {
    auto leaf = c.hidden.detach().clone().requires_grad_(true);
    at::cuda::device_synchronize();
    const int64_t before = allocated_bytes();
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    auto loss = output_head_loss_sum(c.head, leaf, c.targets, {tiling, true});
    loss.backward();
    at::cuda::device_synchronize();
    return peak_bytes() - before;
  };
  peak_above_inputs(LmHeadLoss::vocab_tiles);  // warm-up: cuBLAS workspaces
  peak_above_inputs(LmHeadLoss::row_chunks);
  const int64_t tiled = peak_above_inputs(LmHeadLoss::vocab_tiles);
  const int64_t chunked = peak_above_inputs(LmHeadLoss::row_chunks);
  std::cout << "peak above the inputs: vocab tiles " << (tiled >> 20) << " MiB, row chunks " << (chunked >> 20)
            << " MiB" << std::endl;
  EXPECT_LE(tiled, int64_t{128} << 20);
  EXPECT_GE(chunked, int64_t{300} << 20);
}

TEST(LmHeadLossCuda, VocabTilesReplayFromACudaGraphBitForBit) {
  const auto c = qwen_shaped_case(600, 1024, 5);
  const auto [eager_loss, eager_grad] = loss_and_grad(c.head, c.hidden, c.targets, LmHeadLoss::vocab_tiles);

  const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0));
  auto leaf = c.hidden.detach().clone().requires_grad_(true);
  loss_and_grad(c.head, c.hidden, c.targets, LmHeadLoss::vocab_tiles);  // warm-up on the capturing stream
  at::cuda::CUDAGraph graph;
  at::Tensor captured_loss;
  graph.capture_begin();
  captured_loss = output_head_loss_sum(c.head, leaf, c.targets, {LmHeadLoss::vocab_tiles, true});
  graph.capture_end();
  graph.replay();
  captured_loss.backward();  // reads the gradient the replay saved
  at::cuda::device_synchronize();
  EXPECT_EQ(captured_loss.item<double>(), eager_loss);
  EXPECT_TRUE(cuda_testing::equal_values(leaf.grad().to(at::kFloat), eager_grad));
}

}  // namespace
}  // namespace finetune
