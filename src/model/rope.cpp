#include "finetune/model/rope.h"

#include <cmath>

#include "finetune/model/fused_kernels.h"
#include "finetune/util/errors.h"

namespace finetune {

int64_t rope_rotary_dim(const ModelConfig& config) {
  return static_cast<int64_t>(static_cast<double>(config.head_dim) * config.partial_rotary_factor);
}

// Note [RoPE bit-exactness]
// Each step mirrors transformers' Python expression by expression, including how Python's
// operators map onto ATen: `1.0 / t` is `t.reciprocal() * 1.0`, `base ** t` is pow(Scalar, t),
// `1 - t` is rsub. The same ops in the same order give bit-identical fp32 frequencies.
at::Tensor rope_inverse_frequencies(const ModelConfig& config, const at::Device& device) {
  if (config.rope_scaling.rope_type == "longrope") return longrope_inverse_frequencies(config, device, false);
  const int64_t dim = rope_rotary_dim(config);
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

// transformers' _compute_longrope_parameters: `1.0 / (ext_factors * base**inv_freq_shape)`.
at::Tensor longrope_inverse_frequencies(const ModelConfig& config, const at::Device& device, bool long_factors) {
  const int64_t dim = rope_rotary_dim(config);
  const auto& factors = long_factors ? config.rope_scaling.long_factor : config.rope_scaling.short_factor;
  if (static_cast<int64_t>(factors.size()) * 2 != dim) {
    throw Error("rope_scaling: longrope needs " + std::to_string(dim / 2) + " factors, got " + std::to_string(factors.size()));
  }
  auto ext_factors = at::tensor(std::vector<float>(factors.begin(), factors.end()), at::kFloat).to(device);
  auto inv_freq_shape = at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong)).to(device, at::kFloat) /
                        static_cast<double>(dim);
  return (ext_factors * at::pow(at::Scalar(config.rope_theta), inv_freq_shape)).reciprocal() * 1.0;
}

double rope_attention_scaling(const ModelConfig& config) {
  const auto& scaling = config.rope_scaling;
  if (scaling.rope_type != "longrope") return 1.0;
  if (scaling.attention_factor) return *scaling.attention_factor;
  if (scaling.factor <= 1.0) return 1.0;
  return std::sqrt(1 + std::log(scaling.factor) / std::log(static_cast<double>(scaling.original_max_position_embeddings)));
}

RopeFrequencies rope_frequencies(const ModelConfig& config, const at::Device& device) {
  RopeFrequencies frequencies;
  frequencies.inv_freq = rope_inverse_frequencies(config, device);
  frequencies.attention_scaling = rope_attention_scaling(config);
  if (config.rope_scaling.rope_type == "longrope") {
    frequencies.long_inv_freq = longrope_inverse_frequencies(config, device, true);
    frequencies.original_max_position_embeddings = config.rope_scaling.original_max_position_embeddings;
  }
  return frequencies;
}

RopeTables rope_tables(const RopeFrequencies& frequencies, const at::Tensor& position_ids, at::ScalarType dtype) {
  if (!frequencies.long_inv_freq.defined() || position_ids.numel() == 0) {
    return rope_tables(frequencies.inv_freq, position_ids, dtype, frequencies.attention_scaling);
  }
  // Chosen on the device (no host read, so CUDA graphs can capture it): where() only selects.
  const auto use_long = (position_ids.max() + 1).gt(frequencies.original_max_position_embeddings);  // 0-dim bool
  const auto inv_freq = at::where(use_long, frequencies.long_inv_freq, frequencies.inv_freq);
  return rope_tables(inv_freq, position_ids, dtype, frequencies.attention_scaling);
}

RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& position_ids, at::ScalarType dtype,
                       double attention_scaling) {
  const int64_t batch = position_ids.size(0);
  auto inv_freq_expanded = inv_freq.index({at::indexing::None, at::indexing::Slice(), at::indexing::None})
                               .expand({batch, -1, 1})
                               .to(at::kFloat);                               // (B, D/2, 1)
  auto position_ids_expanded = position_ids.index({at::indexing::Slice(), at::indexing::None,
                                                   at::indexing::Slice()}).to(at::kFloat);  // (B, 1, T)
  auto freqs = at::matmul(inv_freq_expanded, position_ids_expanded).transpose(1, 2);  // (B, T, D/2)
  auto emb = at::cat({freqs, freqs}, -1);                                              // (B, T, D)
  if (attention_scaling != 1.0) return {(emb.cos() * attention_scaling).to(dtype), (emb.sin() * attention_scaling).to(dtype)};
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

static at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  return at::cat({-x2, x1}, -1);
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables, bool fused_kernel) {
  const int64_t rotary_dim = tables.cos.size(-1);
  if (rotary_dim < x.size(-1)) {  // partial rotary: cat([rotated x[..., :rd], x[..., rd:]])
    auto rotated = apply_rope(x.narrow(-1, 0, rotary_dim), tables, /*fused_kernel=*/false);
    return at::cat({rotated, x.narrow(-1, rotary_dim, x.size(-1) - rotary_dim)}, -1);
  }
  if (fused_kernel) return fused_rope(x, tables.cos, tables.sin);
  auto cos = tables.cos.unsqueeze(2);  // (B, T, 1, D)
  auto sin = tables.sin.unsqueeze(2);
  return (x * cos) + (rotate_half(x) * sin);
}

}  // namespace finetune
