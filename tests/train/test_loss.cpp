// The fused LM head + cross-entropy used in training (Note [Fused LM head + cross-entropy]) gives
// the loss and the hidden-state gradient that autograd gives through transformers' formula.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>

#include "../model/tiny_config.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/train/loss.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

ModelConfig head_only_config() { return tiny_llama_config({3000, 16, 16, 0, 2, 2, 8}); }

TEST(FusedLinearCrossEntropy, MatchesAutogradThroughUpcastLogits) {
  CausalLM model(head_only_config(), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  {
    at::NoGradGuard no_grad;
    model.lm_head_weight().normal_(0.0, 0.5, generator);
  }
  const int64_t rows = 2, seq_len = 2600;  // ~5,100 trained positions: two chunks of at most 4096
  auto hidden = at::empty({rows, seq_len, 16}).normal_(0.0, 1.0, generator).requires_grad_(true);
  auto labels = at::randint(0, 3000, {rows, seq_len}, generator, at::TensorOptions().dtype(at::kLong));
  labels.index_put_({0, at::indexing::Slice(0, 100)}, -100);  // some ignored targets

  auto fused = causal_lm_loss_sum(model, hidden, labels);
  (fused * 0.25).backward();
  auto fused_grad = hidden.grad().clone();

  auto reference_hidden = hidden.detach().clone().requires_grad_(true);
  auto logits = model.lm_head(reference_hidden).to(at::kFloat).reshape({-1, 3000});
  auto reference = at::cross_entropy_loss(logits, shift_labels(labels).reshape(-1), std::nullopt, at::Reduction::Sum,
                                          -100);
  (reference * 0.25).backward();

  EXPECT_NEAR(fused.item<double>(), reference.item<double>(), 1e-6 * reference.item<double>());
  const double rel = ((fused_grad - reference_hidden.grad()).norm() / reference_hidden.grad().norm()).item<double>();
  EXPECT_LE(rel, 1e-6);
  EXPECT_GT(reference_hidden.grad().abs().sum().item<double>(), 0.0);

  at::NoGradGuard no_grad;  // evaluation path: transformers' arithmetic
  EXPECT_NEAR(causal_lm_loss_sum(model, hidden.detach(), labels).item<double>(), reference.item<double>(),
              1e-6 * reference.item<double>());
}

// A head with a final logit soft-cap (Gemma-2's final_logit_softcapping): the fused loss and its
// gradient equal autograd through cap * tanh(h W^T / cap), with per-row weights, in fp32.
TEST(FusedLinearCrossEntropy, SoftcappedHeadMatchesAutograd) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  OutputHead head;
  head.weight = at::empty({500, 16}).normal_(0.0, 2.0, generator);  // logits well past the cap
  head.final_logit_softcapping = 5.0;
  auto hidden = at::empty({3, 40, 16}).normal_(0.0, 1.0, generator).requires_grad_(true);
  const auto positions = at::arange(0, 120, 2, at::kLong);  // every other position
  const auto ids = at::randint(0, 500, {60}, generator, at::TensorOptions().dtype(at::kLong));
  const auto weights = at::empty({60}).uniform_(0.0, 2.0, generator);

  auto fused = output_head_loss_sum(head, hidden, {positions, ids, weights});
  (fused * 0.5).backward();

  auto reference_hidden = hidden.detach().clone().requires_grad_(true);
  auto rows = reference_hidden.reshape({-1, 16}).index_select(0, positions);
  auto logits = at::tanh(at::linear(rows, head.weight) / 5.0) * 5.0;
  ASSERT_GT(logits.abs().max().item<double>(), 4.0);  // the cap bends these logits
  auto token_losses = at::cross_entropy_loss(logits, ids, std::nullopt, at::Reduction::None, -100);
  auto reference = (token_losses * weights).sum();
  (reference * 0.5).backward();

  EXPECT_NEAR(fused.item<double>(), reference.item<double>(), 1e-6 * reference.item<double>());
  const double rel = ((hidden.grad() - reference_hidden.grad()).norm() / reference_hidden.grad().norm()).item<double>();
  EXPECT_LE(rel, 1e-6);

  at::NoGradGuard no_grad;  // evaluation: the same soft-capped logits, unweighted
  const auto plain = at::cross_entropy_loss(logits.detach(), ids, std::nullopt, at::Reduction::Sum, -100);
  EXPECT_NEAR(output_head_loss_sum(head, hidden.detach(), {positions, ids, at::Tensor()}).item<double>(),
              plain.item<double>(), 1e-6 * plain.item<double>());
}

// Completions-only rows (each row's prompt half labelled -100): only the labelled positions go
// through the LM head. Their hidden rows are gathered first, so the masked rows' values never reach
// a logit: NaN there leaves the loss and every gradient finite, and both equal the dense reference
// (logits at every position, cross-entropy ignoring -100) computed on finite hidden states, in the
// training (fused) and evaluation paths, with and without Gemma's final logit soft-cap.
void expect_masked_positions_skipped(std::optional<double> softcap) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(9);
  OutputHead head;
  head.weight = at::empty({700, 16}).normal_(0.0, 1.0, generator);
  head.final_logit_softcapping = softcap;
  const int64_t rows = 3, seq_len = 300;
  auto labels = at::randint(0, 700, {rows, seq_len}, generator, at::TensorOptions().dtype(at::kLong));
  labels.narrow(1, 0, seq_len / 2).fill_(-100);  // the prompt half of every row
  const auto targets = shift_labels(labels).reshape(-1);            // (B*T)
  const auto trained = targets.ne(-100);
  const auto positions = trained.nonzero().squeeze(1);               // (N)
  const auto ids = targets.index_select(0, positions);
  ASSERT_LT(positions.size(0), rows * seq_len / 2 + 1);

  const auto finite_hidden = at::empty({rows, seq_len, 16}).normal_(0.0, 1.0, generator);
  auto poisoned = finite_hidden.clone();
  poisoned.view({-1, 16}).index_put_({trained.logical_not()}, std::numeric_limits<float>::quiet_NaN());
  poisoned.requires_grad_(true);
  auto fused = output_head_loss_sum(head, poisoned, {positions, ids, at::Tensor()});
  (fused * 0.125).backward();

  auto reference_hidden = finite_hidden.clone().requires_grad_(true);
  auto logits = at::linear(reference_hidden.reshape({-1, 16}), head.weight);  // every position: (B*T, V)
  if (softcap) logits = at::tanh(logits / *softcap) * *softcap;
  auto reference = at::cross_entropy_loss(logits, targets, std::nullopt, at::Reduction::Sum, -100);
  (reference * 0.125).backward();

  ASSERT_TRUE(std::isfinite(fused.item<double>()));
  ASSERT_TRUE(poisoned.grad().isfinite().all().item<bool>());
  EXPECT_NEAR(fused.item<double>(), reference.item<double>(), 1e-6 * reference.item<double>());
  const double rel = ((poisoned.grad() - reference_hidden.grad()).norm() / reference_hidden.grad().norm()).item<double>();
  EXPECT_LE(rel, 1e-6);
  const auto masked_grad = poisoned.grad().view({-1, 16}).index({trained.logical_not()});
  EXPECT_EQ(masked_grad.abs().max().item<double>(), 0.0);  // masked rows take no gradient at all

  at::NoGradGuard no_grad;
  const auto evaluated = output_head_loss_sum(head, poisoned.detach(), {positions, ids, at::Tensor()});
  EXPECT_NEAR(evaluated.item<double>(), reference.item<double>(), 1e-6 * reference.item<double>());
}

TEST(FusedLinearCrossEntropy, MaskedPromptPositionsNeverReachTheHead) { expect_masked_positions_skipped(std::nullopt); }

TEST(FusedLinearCrossEntropy, MaskedPromptPositionsNeverReachASoftcappedHead) { expect_masked_positions_skipped(5.0); }

// Note [Vocabulary-tiled LM head loss]: 600 trained positions (a 512-row tile and an 88-row one)
// over a 40,000-token vocabulary (three vocabulary tiles for the first, one for the second), the
// head's rows growing in norm along the vocabulary so that later tiles raise the running maximum,
// with row weights (some 0, as a graph's filler rows) and optionally a soft-cap: loss and hidden
// gradient equal autograd through transformers' formula and the row-chunk path in fp32.
void expect_vocab_tiles_match(std::optional<double> softcap) {
  constexpr int64_t kVocab = 40000, kHidden = 16, kRows = 2, kSeqLen = 300;
  ASSERT_EQ(logit_tile_vocab(kLogitTileRows, kVocab), 16384);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  OutputHead head;
  head.weight = at::empty({kVocab, kHidden}).normal_(0.0, 1.0, generator) *
                at::linspace(0.2, 1.0, kVocab).unsqueeze(1);  // the largest logits in the last tiles
  head.final_logit_softcapping = softcap;
  auto hidden = at::empty({kRows, kSeqLen, kHidden}).normal_(0.0, 1.0, generator).requires_grad_(true);
  const auto positions = at::arange(0, kRows * kSeqLen, at::kLong);  // every position
  auto ids = at::randint(0, kVocab, {kRows * kSeqLen}, generator, at::TensorOptions().dtype(at::kLong));
  ids.narrow(0, 0, 3).copy_(at::tensor({int64_t{0}, int64_t{16383}, int64_t{16384}}));  // tiles' edges
  ids.narrow(0, 3, 2).copy_(at::tensor({int64_t{32768}, kVocab - 1}));
  auto weights = at::empty({kRows * kSeqLen}).uniform_(0.0, 2.0, generator);
  weights.narrow(0, 590, 10).zero_();  // filler rows

  auto tiled = output_head_loss_sum(head, hidden, {positions, ids, weights}, {LmHeadLoss::vocab_tiles, false});
  (tiled * 0.5).backward();
  const auto tiled_grad = hidden.grad().clone();
  hidden.mutable_grad().reset();
  auto chunked = output_head_loss_sum(head, hidden, {positions, ids, weights}, {LmHeadLoss::row_chunks, false});
  (chunked * 0.5).backward();

  auto reference_hidden = hidden.detach().clone().requires_grad_(true);
  auto logits = at::linear(reference_hidden.reshape({-1, kHidden}), head.weight);  // (N, V)
  if (softcap) logits = at::tanh(logits / *softcap) * *softcap;
  const auto top_tile = logits.detach().argmax(1).div(16384, "floor");
  ASSERT_GT(top_tile.eq(2).sum().item<int64_t>(), 0);  // maxima in the last tile: rescales happen
  auto token_losses = at::cross_entropy_loss(logits, ids, std::nullopt, at::Reduction::None, -100);
  auto reference = (token_losses * weights).sum();
  (reference * 0.5).backward();

  const double expected = reference.item<double>();
  EXPECT_NEAR(tiled.item<double>(), expected, 1e-6 * expected);
  EXPECT_NEAR(tiled.item<double>(), chunked.item<double>(), 1e-6 * expected);
  const auto& expected_grad = reference_hidden.grad();
  EXPECT_LE(((tiled_grad - expected_grad).norm() / expected_grad.norm()).item<double>(), 1e-6);
  EXPECT_LE(((tiled_grad - hidden.grad()).norm() / expected_grad.norm()).item<double>(), 1e-6);
  EXPECT_EQ(tiled_grad.view({-1, kHidden}).narrow(0, 590, 10).abs().max().item<double>(), 0.0);  // filler rows
}

TEST(VocabTiledCrossEntropy, MatchesAutogradAndRowChunksAcrossTiles) { expect_vocab_tiles_match(std::nullopt); }

TEST(VocabTiledCrossEntropy, MatchesAutogradAndRowChunksThroughASoftcap) { expect_vocab_tiles_match(4.0); }

// In bf16 (the training dtype on GPUs) the tiles round the probabilities relative to the running
// maximum and sum the products in fp32: on the same bf16 head and hidden states, their distance to
// the fp32 arithmetic is no larger than the row-chunk path's, which rounds (softmax - onehot) and
// its product to bf16. (Both share the larger error of the bf16 logits.)
TEST(VocabTiledCrossEntropy, Bf16IsAsCloseToFp32AsRowChunks) {
  constexpr int64_t kVocab = 20000, kHidden = 64, kCount = 700;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(13);
  OutputHead head16;
  head16.weight = at::empty({kVocab, kHidden}).normal_(0.0, 0.3, generator).to(at::kBFloat16);
  const auto hidden16 = at::empty({1, kCount, kHidden}).normal_(0.0, 1.0, generator).to(at::kBFloat16);
  const auto positions = at::arange(0, kCount, at::kLong);
  const auto ids = at::randint(0, kVocab, {kCount}, generator, at::TensorOptions().dtype(at::kLong));
  const OutputHead head32{head16.weight.to(at::kFloat), std::nullopt};
  const auto head_loss = [&](const OutputHead& head, const at::Tensor& h, LmHeadLoss tiling) {
    auto leaf = h.clone().requires_grad_(true);
    auto loss = output_head_loss_sum(head, leaf, {positions, ids, at::Tensor()}, {tiling, false});
    loss.backward();
    return std::make_pair(loss.item<double>(), leaf.grad().to(at::kFloat));
  };
  const auto [loss32, grad32] = head_loss(head32, hidden16.to(at::kFloat), LmHeadLoss::row_chunks);
  const auto [tiled_loss, tiled_grad] = head_loss(head16, hidden16, LmHeadLoss::vocab_tiles);
  const auto [chunked_loss, chunked_grad] = head_loss(head16, hidden16, LmHeadLoss::row_chunks);
  const double tiled_distance = ((tiled_grad - grad32).norm() / grad32.norm()).item<double>();
  const double chunked_distance = ((chunked_grad - grad32).norm() / grad32.norm()).item<double>();
  EXPECT_GT(chunked_distance, 0.0);
  EXPECT_LE(tiled_distance, chunked_distance);
  EXPECT_LE(std::abs(tiled_loss - loss32), std::abs(chunked_loss - loss32) + 1e-6 * loss32);
}

TEST(VocabTiledCrossEntropy, TilesHoldAbout32MibOfLogits) {
  EXPECT_EQ(logit_tile_vocab(kLogitTileRows, 151936), 16384);  // Qwen3 with 512 rows: 10 tiles
  EXPECT_EQ(logit_tile_vocab(200, 151936), 41856);             // a short micro-batch: 4 tiles
  EXPECT_EQ(logit_tile_vocab(1, 151936), 151936);              // at most the vocabulary
  EXPECT_EQ(logit_tile_vocab(kLogitTileRows, 3000), 3000);
  EXPECT_EQ(logit_tile_vocab(int64_t{1} << 20, 151936), 128);  // at least 128 columns
}

// The one place that picks the GPU kernel of the vocabulary tiles: CUDA, bf16 or fp16, no soft-cap.
TEST(VocabTiledCrossEntropy, FusedKernelOnlyForUncappedHalfPrecisionCudaHeads) {
  const at::Device cuda(at::kCUDA, 0);
  EXPECT_FALSE(fused_vocab_tile_kernel(at::kCPU, at::kBFloat16, false));
  EXPECT_FALSE(fused_vocab_tile_kernel(at::kCPU, at::kFloat, false));
  EXPECT_FALSE(fused_vocab_tile_kernel(cuda, at::kFloat, false));
  EXPECT_FALSE(fused_vocab_tile_kernel(cuda, at::kBFloat16, true));
  EXPECT_EQ(fused_vocab_tile_kernel(cuda, at::kBFloat16, false), cuda_kernels_compiled_in());
  EXPECT_EQ(fused_vocab_tile_kernel(cuda, at::kHalf, false), cuda_kernels_compiled_in());
}

TEST(VocabTiledCrossEntropy, NamesRoundTrip) {
  for (const auto& name : lm_head_loss_names()) EXPECT_EQ(lm_head_loss_name(lm_head_loss_from_name(name)), name);
  EXPECT_THROW(lm_head_loss_from_name("columns"), Error);
}

TEST(FusedLinearCrossEntropy, ChunksHoldAboutAQuarterGibOfLogits) {
  EXPECT_EQ(logit_chunk_rows(151936), 441);  // Qwen2/Qwen3
  EXPECT_EQ(logit_chunk_rows(128256), 523);  // Llama 3
  EXPECT_EQ(logit_chunk_rows(32000), 2097);  // Mistral, Llama 2
  EXPECT_EQ(logit_chunk_rows(3000), 4096);   // tiny vocabularies: at most 4096 rows
  EXPECT_EQ(logit_chunk_rows(int64_t{1} << 24), 64);
}

}  // namespace
}  // namespace finetune
