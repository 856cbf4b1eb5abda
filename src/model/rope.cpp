#include "finetune/model/rope.h"

#include <algorithm>
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
namespace {

// (arange(0, dim, 2) as int64, to fp32) / dim: the exponents of theta.
at::Tensor theta_exponents(int64_t dim, const at::Device& device) {
  return at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong)).to(device, at::kFloat) / static_cast<double>(dim);
}

// _compute_dynamic_ntk_parameters at init (seq_len = max_position_embeddings), in Python floats.
double dynamic_ntk_initial_theta(const ModelConfig& config) {
  const double dim = static_cast<double>(rope_rotary_dim(config));
  const double factor = config.rope_scaling.factor;
  const double max_positions = static_cast<double>(config.max_position_embeddings);
  return config.rope_theta * std::pow((factor * max_positions / max_positions) - (factor - 1), dim / (dim - 2));
}

// _compute_yarn_parameters' find_correction_dim: the dimension whose wavelength makes
// num_rotations turns over max_position_embeddings.
double yarn_correction_dim(double num_rotations, double dim, double base, double max_position_embeddings) {
  return (dim * std::log(max_position_embeddings / (num_rotations * 2 * M_PI))) / (2 * std::log(base));
}

// transformers' _compute_yarn_parameters: interpolated (1 / (factor * theta^e)) and extrapolated
// (1 / theta^e) frequencies blended by a linear ramp over the dimensions between the corrections
// for beta_fast and beta_slow rotations over original_max_position_embeddings.
at::Tensor yarn_inverse_frequencies(const ModelConfig& config, const at::Device& device) {
  const auto& scaling = config.rope_scaling;
  const int64_t dim = rope_rotary_dim(config);
  const double base = config.rope_theta;
  const auto original = static_cast<double>(scaling.original_max_position_embeddings);
  auto pos_freqs = at::pow(at::Scalar(base), theta_exponents(dim, device));
  auto inv_freq_extrapolation = pos_freqs.reciprocal() * 1.0;
  auto inv_freq_interpolation = (pos_freqs * scaling.factor).reciprocal() * 1.0;

  double low = yarn_correction_dim(scaling.beta_fast, static_cast<double>(dim), base, original);
  double high = yarn_correction_dim(scaling.beta_slow, static_cast<double>(dim), base, original);
  if (scaling.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // linear_ramp_factor's guard against a zero-width ramp
  auto ramp = ((at::arange(dim / 2, at::TensorOptions().dtype(at::kFloat)) - low) / (high - low)).clamp(0, 1);
  auto extrapolation_factor = at::rsub(ramp.to(device, at::kFloat), 1);
  return inv_freq_interpolation * at::rsub(extrapolation_factor, 1) + inv_freq_extrapolation * extrapolation_factor;
}

// yarn's get_mscale: 0.1 * mscale * ln(scale) + 1 above a scale of 1.
double yarn_mscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

at::Tensor rope_inverse_frequencies(const ModelConfig& config, const at::Device& device) {
  if (config.rope_scaling.rope_type == "longrope") return longrope_inverse_frequencies(config, device, false);
  if (config.rope_scaling.rope_type == "yarn") return yarn_inverse_frequencies(config, device);
  const int64_t dim = rope_rotary_dim(config);
  const double theta = config.rope_scaling.rope_type == "dynamic" ? dynamic_ntk_initial_theta(config) : config.rope_theta;
  auto inv_freq = at::pow(at::Scalar(theta), theta_exponents(dim, device)).reciprocal() * 1.0;

  const auto& scaling = config.rope_scaling;
  if (scaling.rope_type == "default" || scaling.rope_type == "dynamic") return inv_freq;
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

at::Tensor dynamic_ntk_inverse_frequencies(const DynamicNtk& ntk, const at::Tensor& seq_len) {
  const auto length = at::maximum(seq_len, at::scalar_tensor(ntk.max_position_embeddings, seq_len.options()));
  const double dim = static_cast<double>(ntk.rotary_dim);
  // base * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2)), on tensors
  const auto base = at::pow(length * ntk.factor / ntk.max_position_embeddings - (ntk.factor - 1), dim / (dim - 2)) *
                    ntk.rope_theta;  // 0-dim fp32
  return at::pow(base, theta_exponents(ntk.rotary_dim, seq_len.device())).reciprocal() * 1.0;
}

double rope_attention_scaling(const ModelConfig& config) {
  const auto& scaling = config.rope_scaling;
  if (scaling.rope_type == "yarn") {
    if (scaling.attention_factor) return *scaling.attention_factor;
    if (scaling.mscale && *scaling.mscale != 0 && scaling.mscale_all_dim && *scaling.mscale_all_dim != 0) {
      return yarn_mscale(scaling.factor, *scaling.mscale) / yarn_mscale(scaling.factor, *scaling.mscale_all_dim);
    }
    return yarn_mscale(scaling.factor, 1);
  }
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
  if (config.rope_scaling.rope_type == "dynamic") {
    frequencies.dynamic_ntk =
        DynamicNtk{config.rope_theta, config.rope_scaling.factor, config.max_position_embeddings, rope_rotary_dim(config)};
  }
  return frequencies;
}

RopeTables rope_tables(const RopeFrequencies& frequencies, const at::Tensor& position_ids, at::ScalarType dtype) {
  if (frequencies.dynamic_ntk && position_ids.numel() > 0) {
    // Chosen on the device, as longrope's below: past max_position_embeddings, this length's frequencies.
    const auto seq_len = position_ids.max() + 1;  // 0-dim int64
    const auto dynamic = dynamic_ntk_inverse_frequencies(*frequencies.dynamic_ntk, seq_len);
    const auto inv_freq =
        at::where(seq_len.gt(frequencies.dynamic_ntk->max_position_embeddings), dynamic, frequencies.inv_freq);
    return rope_tables(inv_freq, position_ids, dtype, frequencies.attention_scaling);
  }
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
