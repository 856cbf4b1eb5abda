// The fused CUDA kernel of the vocabulary-tiled LM head loss (train/cuda/vocab_tile_softmax_kernel.cu,
// Note [Vocabulary-tiled LM head loss]) against the ATen composition it replaces, run on the same
// GPU by the same code with HeadLossOptions::vocab_tile_kernel off:
//  - bf16 and fp16; vocabularies of one tile and of several, with a last tile shorter than the others
//    (151,936, 32,000, 1,000, and 1,003, whose odd tile width takes the kernel's element-wise path);
//    1, 37, 512 and 600 rows (600: a second row tile of 88 rows with wider tiles); targets in the
//    first and the last tile; rows of weight 0, and no row weights at all;
//  - captured in a CUDA graph, a replay gives the eager fused loss and gradient bit for bit;
//  - a soft-capped head keeps the composition.
//
// Why the bounds: both paths compute the same logits (the same head GEMM), the same maxima (exact),
// and the same rescales and probabilities (the same formula on the same fp32 values), hence the same
// products and G; only the fp32 sum S of a tile's exp(z - m) adds its terms in another order. A sum
// of positive fp32 terms done in j sequential additions is within j 2^-24 of its exact value,
// relatively; the kernel's are at most ~600 per thread (a row of 151,936 in one tile) plus 8 tree
// levels, ATen's fewer, so the two S differ by < 1e-4 relatively and a token loss log S + m - z_t
// by < 1e-4 absolutely. These random heads' token losses are about log V + 1/2, over 6, with the
// long serial sums only at V = 151,936 (losses near 12): the loss sum agrees to well under 1e-5
// relatively, the bound, whatever the input dtype (all of this arithmetic is fp32; the actual
// difference is far smaller, as the rounding errors do not all point one way).
// The gradient G / S - W_target moves by as little in fp32, but it is rounded to the model dtype, so
// an element next to a rounding boundary lands on the neighbouring value: every element within one
// unit in the last place of the dtype, and few of them (under 1%, or 8 of a short tensor) differing.
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "finetune/train/loss.h"
#include "kernel_comparison.h"

namespace finetune {
namespace {

constexpr int64_t kHidden = 128;

struct TileCase {
  OutputHead head;
  at::Tensor hidden;  // (N, C) model dtype
  TokenTargets targets;
};

// A head whose later vocabulary rows are larger (the running maximum rises from tile to tile, so the
// rescale matters), targets 0 (first tile) and V - 1 (last tile) among random ones, the last 3 rows
// of weight 0 (filler rows) when there are more than 3; `weighted` false: no row weights.
TileCase tile_case(int64_t vocab, int64_t count, at::ScalarType dtype, bool weighted, uint64_t seed) {
  const auto options = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  at::manual_seed(seed);
  TileCase c;
  const auto row_scale = at::linspace(0.3, 1.0, vocab, options).unsqueeze(1);  // (V, 1)
  c.head.weight = (at::randn({vocab, kHidden}, options) * 0.15 * row_scale).to(dtype);
  c.hidden = at::randn({count, kHidden}, options).to(dtype);
  c.targets.positions = at::arange(count, options.dtype(at::kLong));
  c.targets.ids = at::randint(0, vocab, {count}, options.dtype(at::kLong));
  c.targets.ids.narrow(0, 0, 1).fill_(count > 1 ? 0 : vocab - 1);
  if (count > 1) c.targets.ids.narrow(0, 1, 1).fill_(vocab - 1);
  if (weighted) {
    c.targets.weights = at::rand({count}, options.dtype(at::kFloat)) + 0.5;
    if (count > 3) c.targets.weights.narrow(0, count - 3, 3).zero_();
  }
  return c;
}

struct LossAndGrad {
  at::Tensor loss;  // fp32 scalar
  at::Tensor grad;  // (N, C) model dtype
};

LossAndGrad tiled_loss(const TileCase& c, bool vocab_tile_kernel) {
  auto leaf = c.hidden.detach().clone().requires_grad_(true);
  auto loss = output_head_loss_sum(c.head, leaf, c.targets,
                                   {LmHeadLoss::vocab_tiles, /*fp32_output_gemm=*/true, vocab_tile_kernel});
  loss.backward();
  return {loss.detach(), leaf.grad()};
}

void expect_fused_matches_composition(const TileCase& c, const std::string& label) {
  SCOPED_TRACE(label);
  const auto fused = tiled_loss(c, /*vocab_tile_kernel=*/true);
  const auto composed = tiled_loss(c, /*vocab_tile_kernel=*/false);
  const double fused_loss = fused.loss.item<double>(), composed_loss = composed.loss.item<double>();
  EXPECT_NEAR(fused_loss, composed_loss, 1e-5 * std::abs(composed_loss));
  const auto magnitude = at::maximum(cuda_testing::host_double(fused.grad).abs(),
                                     cuda_testing::host_double(composed.grad).abs());
  EXPECT_TRUE(cuda_testing::within_bound(fused.grad, composed.grad,
                                         cuda_testing::ulp_at(magnitude, c.hidden.scalar_type())));
  EXPECT_LE(cuda_testing::count_differing(fused.grad, composed.grad), std::max<int64_t>(fused.grad.numel() / 100, 8));
  if (c.targets.weights.defined() && c.hidden.size(0) > 3) {  // filler rows: no gradient at all
    EXPECT_EQ(fused.grad.narrow(0, c.hidden.size(0) - 3, 3).abs().max().item<double>(), 0.0);
  }
}

TEST(FusedVocabTile, MatchesTheCompositionAcrossVocabulariesAndRowCounts) {
  for (const auto dtype : cuda_testing::half_dtypes()) {
    ASSERT_TRUE(fused_vocab_tile_kernel(at::Device(at::kCUDA, 0), dtype, /*softcapped=*/false));
    for (const int64_t vocab : {int64_t{151936}, int64_t{32000}, int64_t{1000}, int64_t{1003}}) {
      for (const int64_t count : {int64_t{1}, int64_t{37}, int64_t{512}, int64_t{600}}) {
        const bool weighted = count != 37;
        const auto c = tile_case(vocab, count, dtype, weighted, static_cast<uint64_t>(vocab + count));
        expect_fused_matches_composition(c, std::string(c10::toString(dtype)) + ", vocabulary " +
                                                std::to_string(vocab) + ", " + std::to_string(count) + " rows");
      }
    }
  }
}

// As a graphed micro-step captures the loss: the kernel launches on the capturing stream, with no
// host synchronisation, and a replay reproduces the eager fused result exactly.
TEST(FusedVocabTile, ReplaysFromACudaGraphBitForBit) {
  const auto c = tile_case(151936, 600, at::kHalf, /*weighted=*/true, 21);
  const auto eager = tiled_loss(c, /*vocab_tile_kernel=*/true);

  const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0));
  auto leaf = c.hidden.detach().clone().requires_grad_(true);
  tiled_loss(c, true);  // warm-up on the capturing stream
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  auto captured_loss = output_head_loss_sum(c.head, leaf, c.targets, {LmHeadLoss::vocab_tiles, true, true});
  graph.capture_end();
  graph.replay();
  captured_loss.backward();  // reads the gradient the replay saved
  at::cuda::device_synchronize();
  EXPECT_EQ(captured_loss.item<double>(), eager.loss.item<double>());
  EXPECT_TRUE(cuda_testing::equal_values(leaf.grad(), eager.grad));
}

// A soft-capped head (Gemma-2) is not fused: with the kernel allowed or not, the same composition.
TEST(FusedVocabTile, SoftcappedHeadKeepsTheComposition) {
  auto c = tile_case(32000, 600, at::kBFloat16, /*weighted=*/true, 22);
  c.head.final_logit_softcapping = 5.0;
  ASSERT_FALSE(fused_vocab_tile_kernel(c.head.weight.device(), at::kBFloat16, /*softcapped=*/true));
  const auto allowed = tiled_loss(c, /*vocab_tile_kernel=*/true);
  const auto composed = tiled_loss(c, /*vocab_tile_kernel=*/false);
  EXPECT_EQ(allowed.loss.item<double>(), composed.loss.item<double>());
  EXPECT_TRUE(cuda_testing::equal_values(allowed.grad, composed.grad));
}

}  // namespace
}  // namespace finetune
