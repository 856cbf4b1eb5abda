#include "finetune/model/rope.h"

#include <cmath>

#include "finetune/model/fused_kernels.h"
#include "finetune/util/errors.h"

namespace finetune {

// Note [RoPE bit-exactness]
// Each step mirrors transformers' Python expression by expression, including how Python's
// operators map onto ATen: `1.0 / t` is `t.reciprocal() * 1.0`, `base ** t` is pow(Scalar, t),
// `1 - t` is rsub. The same ops in the same order give bit-identical fp32 frequencies.
at::Tensor rope_inverse_frequencies(const ModelConfig& config, const at::Device& device) {
  const int64_t dim = config.head_dim;
  auto exponent = at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong)).to(device, at::kFloat) /
                  static_cast<double>(dim);
  auto inv_freq = at::pow(at::Scalar(config.rope_theta), exponent).reciprocal() * 1.0;

  const auto& scaling = config.rope_scaling;
  if (scaling.rope_type == "default") return inv_freq;
  if (scaling.rope_type == "linear") return inv_freq / scaling.factor;
  if (scaling.rope_type != "llama3") {
    throw Error("rope_scaling.rope_type '" + scaling.rope_type + "' is not supported");
  }
  const double factor = scaling.factor;
  const double low_freq_factor = scaling.low_freq_factor;
  const double high_freq_factor = scaling.high_freq_factor;
  const double old_context_len = static_cast<double>(scaling.original_max_position_embeddings);
  const double low_freq_wavelen = old_context_len / low_freq_factor;
  const double high_freq_wavelen = old_context_len / high_freq_factor;

  auto wavelen = inv_freq.reciprocal() * (2 * M_PI);
  auto inv_freq_llama = at::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  auto smooth_factor = (wavelen.reciprocal() * old_context_len - low_freq_factor) /
                       (high_freq_factor - low_freq_factor);
  auto smoothed_inv_freq = at::rsub(smooth_factor, 1) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
  auto is_medium_freq = (wavelen < high_freq_wavelen).logical_not() * (wavelen > low_freq_wavelen).logical_not();
  return at::where(is_medium_freq, smoothed_inv_freq, inv_freq_llama);
}

RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& position_ids, at::ScalarType dtype) {
  const int64_t batch = position_ids.size(0);
  auto inv_freq_expanded = inv_freq.index({at::indexing::None, at::indexing::Slice(), at::indexing::None})
                               .expand({batch, -1, 1})
                               .to(at::kFloat);                               // (B, D/2, 1)
  auto position_ids_expanded = position_ids.index({at::indexing::Slice(), at::indexing::None,
                                                   at::indexing::Slice()}).to(at::kFloat);  // (B, 1, T)
  auto freqs = at::matmul(inv_freq_expanded, position_ids_expanded).transpose(1, 2);  // (B, T, D/2)
  auto emb = at::cat({freqs, freqs}, -1);                                              // (B, T, D)
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

static at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  return at::cat({-x2, x1}, -1);
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables, bool fused_kernel) {
  if (fused_kernel) return fused_rope(x, tables.cos, tables.sin);
  auto cos = tables.cos.unsqueeze(2);  // (B, T, 1, D)
  auto sin = tables.sin.unsqueeze(2);
  return (x * cos) + (rotate_half(x) * sin);
}

}  // namespace finetune
