// transformers' logits processors for generate(), op for op on fp32 scores (B, V), in the order
// GenerationMixin._get_logits_processor applies them: RepetitionPenaltyLogitsProcessor (greedy
// and sampling), then, only when sampling, TemperatureLogitsWarper (temperature != 1),
// TopKLogitsWarper (top_k != 0) and TopPLogitsWarper (top_p < 1), with min_tokens_to_keep = 1.
#pragma once

#include <ATen/ATen.h>

#include "finetune/generate/generation_config.h"

namespace finetune {

// sequences: (B, L) int64, every id of each row so far (padding and prompt included, as
// transformers' input_ids). Penalized scores: negative ones multiplied, others divided.
at::Tensor apply_repetition_penalty(const at::Tensor& scores, const at::Tensor& sequences, double penalty);
at::Tensor apply_temperature(const at::Tensor& scores, double temperature);
// Scores below the k-th largest become -inf (ties with it are kept).
at::Tensor apply_top_k(const at::Tensor& scores, int64_t top_k);
// The smallest set whose probability reaches top_p is kept (always the most likely token).
at::Tensor apply_top_p(const at::Tensor& scores, double top_p);

// All of the above that `config` enables, in transformers' order.
at::Tensor process_logits(const at::Tensor& scores, const at::Tensor& sequences, const GenerationConfig& config);

}  // namespace finetune
