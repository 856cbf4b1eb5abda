// Causal-LM cross-entropy as transformers' ForCausalLMLoss computes it: logits at t predict
// labels at t+1 (Note [Next-token targets] in data/sample.h), -100 is ignored, logits are upcast
// to fp32. Only positions that are trained on go through the LM head, in chunks, so full
// (B, T, V) fp32 logits never exist; when gradients are needed the head and the loss are fused (Note [Fused LM head + cross-entropy]) and keep no
// logits at all for the backward pass.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "finetune/model/causal_lm.h"
#include "finetune/train/lm_head_loss_names.h"

namespace finetune {

// The trained positions of a micro-batch, located on the host: flat indices into the (B*T) rows
// of the hidden states, the token each is trained on, and optionally a weight per row.
struct TokenTargets {
  at::Tensor positions;  // (N) int64
  at::Tensor ids;        // (N) int64
  at::Tensor weights;    // undefined (all 1), or (N) fp32: training only (the fused loss)
};

// How the fused training loss walks the (trained positions x vocabulary) logits (--lm_head_loss):
// vocab_tiles = tiles of at most kLogitTileRows rows x logit_tile_vocab columns with an online
// logsumexp (Note [Vocabulary-tiled LM head loss]); row_chunks = logit_chunk_rows rows x the whole
// vocabulary at a time (Note [Fused LM head + cross-entropy]). Evaluation takes row chunks either way.
enum class LmHeadLoss { vocab_tiles, row_chunks };  // in lm_head_loss_names()' order
// What training uses unless told (--lm_head_loss's default names it too: Options::lm_head_loss).
inline constexpr LmHeadLoss kDefaultLmHeadLoss = LmHeadLoss::vocab_tiles;
LmHeadLoss lm_head_loss_from_name(const std::string& name);  // Error for another name
const std::string& lm_head_loss_name(LmHeadLoss tiling);

struct HeadLossOptions {
  LmHeadLoss tiling = kDefaultLmHeadLoss;
  // GEMMs of half-precision operands may return their fp32 accumulator (KernelPolicy::
  // half_gemm_fp32_output); otherwise vocab tiles widen the operands to fp32 for that product.
  bool fp32_output_gemm = false;
  // Vocabulary tiles may run their softmax steps in the fused CUDA kernel where
  // fused_vocab_tile_kernel allows it; false keeps the ATen composition everywhere (the GPU tests
  // compare the two with it; not a user option).
  bool vocab_tile_kernel = true;
};

// hidden (B, T, C), labels (B, T) -> fp32 scalar: sum of token losses over trainable positions.
at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const at::Tensor& labels);

// The same, with the trainable positions (flat indices into B*T) and their target ids given
// (DeviceBatch computes them on the host): no device->host synchronisation. target_weights
// (training only): undefined, or (N) fp32 weights, each row's token loss and its gradient
// multiplied by its own (a 0 marks a filler row that adds nothing: Note [Graphed micro-steps] in
// train/micro_step_graphs.h).
at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const at::Tensor& target_positions,
                              const at::Tensor& target_ids, const at::Tensor& target_weights = {});
at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets,
                              LmHeadLoss tiling = kDefaultLmHeadLoss);

// A model's head-loss options: `tiling`, and its kernel policy's fp32-output GEMMs.
HeadLossOptions head_loss_options(const CausalLM& model, LmHeadLoss tiling);

// The same through any output head (what the CausalLM overloads call with model.output_head()):
// the head's transform (a final logit soft-cap) is part of the loss and of its gradient.
at::Tensor output_head_loss_sum(const OutputHead& head, const at::Tensor& hidden, const TokenTargets& targets,
                                const HeadLossOptions& options = {});

// The backward pass of a micro-step: loss_sum / global_tokens (Note [Global token normalisation]
// in train/trainer.h), times loss_scale when it is defined (fp16, train/loss_scaler.h).
void backward_normalised_loss(const at::Tensor& loss_sum, const at::Tensor& global_tokens,
                              const at::Tensor& loss_scale);

// Trained positions that go through the LM head at a time: about 256 MiB of fp32 logits, between
// 64 and 4096 rows (441 rows at Qwen's 152k vocabulary).
int64_t logit_chunk_rows(int64_t vocab_size);

// The fused training loss's vocabulary tiles (LmHeadLoss::vocab_tiles): at most this many trained
// positions per tile, and the vocabulary columns of a tile of `rows` rows: about 32 MiB of fp32
// logits, a multiple of 128 columns (at least 128), at most the whole vocabulary.
constexpr int64_t kLogitTileRows = 512;
int64_t logit_tile_vocab(int64_t rows, int64_t vocab_size);

// Whether the vocabulary tiles of a head on `device` in `dtype` (soft-capped or not) run their
// softmax steps in the fused CUDA kernel (Note [Vocabulary-tiled LM head loss] in train/loss.cpp):
// a CUDA device, bf16 or fp16, no soft-cap, in a build with the CUDA kernels. Everything else
// keeps the ATen composition.
bool fused_vocab_tile_kernel(const at::Device& device, at::ScalarType dtype, bool softcapped);

// labels shifted left by kTargetShift with -100 appended (Note [Next-token targets]): (B, T).
at::Tensor shift_labels(const at::Tensor& labels);

}  // namespace finetune
