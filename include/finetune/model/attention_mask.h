// Which keys each query may attend to, built once per batch and shared by all layers.
// Unpadded batches use SDPA's is_causal fast path; right-padded and packed rows get an explicit
// boolean mask (B, 1, T, T): causal within each sample, nothing across samples or onto padding.
#pragma once

#include <vector>

#include <ATen/ATen.h>

namespace finetune {

struct AttentionMask {
  bool is_causal_only = true;  // true: no explicit mask needed
  at::Tensor mask;             // (B, 1, T, T) bool, true = attend; undefined when is_causal_only
  // Variable-length layout (GPU): one row of all real tokens, no padding; attention is causal
  // within each sample, by flash attention over cumulative sample lengths.
  at::Tensor cu_seqlens;       // (samples + 1) int32 on the device; undefined otherwise
  int64_t max_seqlen = 0;
  std::vector<int64_t> sample_lengths;  // on the host: what cu_seqlens bounds (the eager soft-capped path reads it)
  bool variable_length() const { return cu_seqlens.defined(); }
};

// For a flattened batch (one row, see data/batch.h flatten()) with these sample lengths.
AttentionMask variable_length_mask(const std::vector<int64_t>& sample_lengths, const at::Device& device);

// sample_lengths[row] lists the lengths of the samples packed into that row (one entry when
// unpacked); positions past their sum are padding.
AttentionMask build_attention_mask(const std::vector<std::vector<int64_t>>& sample_lengths, int64_t seq_len,
                                   const at::Device& device);

}  // namespace finetune
