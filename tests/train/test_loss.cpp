// The fused LM head + cross-entropy used in training (Note [Fused LM head + cross-entropy]) gives
// the loss and the hidden-state gradient that autograd gives through transformers' formula.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>

#include "../model/tiny_config.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/loss.h"

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

TEST(FusedLinearCrossEntropy, ChunksHoldAboutAQuarterGibOfLogits) {
  EXPECT_EQ(logit_chunk_rows(151936), 441);  // Qwen2/Qwen3
  EXPECT_EQ(logit_chunk_rows(128256), 523);  // Llama 3
  EXPECT_EQ(logit_chunk_rows(32000), 2097);  // Mistral, Llama 2
  EXPECT_EQ(logit_chunk_rows(3000), 4096);   // tiny vocabularies: at most 4096 rows
  EXPECT_EQ(logit_chunk_rows(int64_t{1} << 24), 64);
}

}  // namespace
}  // namespace finetune
