// NEFTune (Jain et al., 2023; TRL/transformers' neftune_noise_alpha): while training, the input
// embeddings get uniform noise, as transformers' neftune_post_forward_hook adds it to the output of
// get_input_embeddings() (so after Gemma's sqrt(hidden) scale, which transformers applies inside
// that module): embedded + U(-mag, mag) with mag = alpha / sqrt(L * C), C the hidden size and L the
// sequence dimension of the embedding output in transformers, i.e. the micro-batch's padded length.
//
// Note [NEFTune length and seeds]
// finetune's micro-batches are right-padded rows of one sample each, or (GPU) the same samples as
// one padding-free row. L is the padded length transformers would see for that micro-batch: its
// longest sample (the sample's own length with a batch of 1), whatever the layout. In the padded
// layout the noise is drawn over the (B, L, C) embeddings exactly as transformers draws it; in the
// padding-free row it is drawn over (1, N, C), the same distribution at every real token.
// Packed rows (several samples in one row, --packing) have no such padded length and are refused
// by the option checks. Each micro-batch draws from its own generator, seeded by
// embedding_noise_seed (below) on the model's device: on the CPU the noise equals what torch draws
// after torch.manual_seed(that seed), so a reference can reproduce it.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace finetune {

struct EmbeddingNoise {
  double alpha = 0;           // > 0: transformers' neftune_noise_alpha
  int64_t padded_length = 0;  // L, Note [NEFTune length and seeds]
  uint64_t seed = 0;          // of this forward's generator (embedding_noise_seed)
};

// transformers' mag_norm, computed as it does (torch.sqrt of the int64 L * C gives float32, and
// `alpha / tensor` is tensor.reciprocal() * alpha): the float32 value, as a double.
double embedding_noise_magnitude(double alpha, int64_t padded_length, int64_t hidden_size);

// embedded (B, T, C) + uniform noise in [-mag, mag] of the same shape and dtype, drawn from a
// fresh generator of embedded's device seeded with noise.seed.
at::Tensor add_embedding_noise(const at::Tensor& embedded, const EmbeddingNoise& noise);

// The seed of micro-batch `micro_batch` (0-based) of optimizer step `step` on `rank`: splitmix64
// chained over (run seed, step, rank, micro-batch), h = splitmix64(h ^ value) for each value after
// h = run_seed. Distinct streams per micro-batch and rank; a resumed run draws what the
// uninterrupted one would.
uint64_t embedding_noise_seed(uint64_t run_seed, int64_t step, int64_t rank, int64_t micro_batch);

}  // namespace finetune
