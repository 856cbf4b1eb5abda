#include "finetune/model/causal_lm.h"

#include <cmath>
#include <limits>
#include <utility>

#include "finetune/model/checkpoint_function.h"
#include "finetune/model/fused_kernels.h"
#include "finetune/model/rms_norm.h"
#include "finetune/model/rope.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// A 4-bit projection's weight is a meta tensor (its shape, no storage) until the loader gives it
// the 4-bit one (checkpoint/model_weights.h): the dense weight never exists on the device.
Linear make_linear(int64_t in_features, int64_t out_features, bool bias, const at::TensorOptions& options,
                   bool weight_4bit) {
  Linear layer;
  layer.compute_dtype = c10::typeMetaToScalarType(options.dtype());
  layer.weight = at::empty({out_features, in_features}, weight_4bit ? options.device(at::kMeta) : options);
  if (bias) layer.bias = at::empty({out_features}, options);
  return layer;
}

void add_linear(std::vector<std::pair<std::string, at::Tensor>>& out, const std::string& prefix,
                const Linear& layer) {
  if (!layer.weight.is_meta()) out.emplace_back(prefix + ".weight", layer.weight);
  if (layer.bias.defined()) out.emplace_back(prefix + ".bias", layer.bias);
}

}  // namespace

CausalLM::CausalLM(ModelConfig config, at::ScalarType dtype, at::Device device, bool projections_4bit)
    : config_(std::move(config)), dtype_(dtype), device_(device), projections_4bit_(projections_4bit),
      kernels_(choose_kernel_policy(device, dtype, config_)) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  const int64_t hidden = config_.hidden_size;
  const int64_t head_dim = config_.head_dim;
  const int64_t q_size = config_.num_attention_heads * head_dim;
  const int64_t kv_size = config_.num_key_value_heads * head_dim;

  embed_tokens_ = at::empty({config_.vocab_size, hidden}, options);
  layers_.resize(config_.num_hidden_layers);
  for (auto& layer : layers_) {
    layer.input_layernorm = at::empty({hidden}, options);
    layer.post_attention_layernorm = at::empty({hidden}, options);
    layer.q_proj = make_linear(hidden, q_size, config_.attention_bias, options, projections_4bit);
    layer.k_proj = make_linear(hidden, kv_size, config_.attention_bias, options, projections_4bit);
    layer.v_proj = make_linear(hidden, kv_size, config_.attention_bias, options, projections_4bit);
    layer.o_proj = make_linear(q_size, hidden, config_.attention_output_bias, options, projections_4bit);
    if (config_.qk_norm) {
      layer.q_norm = at::empty({head_dim}, options);
      layer.k_norm = at::empty({head_dim}, options);
    }
    layer.gate_proj = make_linear(hidden, config_.intermediate_size, config_.mlp_bias, options, projections_4bit);
    layer.up_proj = make_linear(hidden, config_.intermediate_size, config_.mlp_bias, options, projections_4bit);
    layer.down_proj = make_linear(config_.intermediate_size, hidden, config_.mlp_bias, options, projections_4bit);
  }
  norm_ = at::empty({hidden}, options);
  if (!config_.tie_word_embeddings) lm_head_ = at::empty({config_.vocab_size, hidden}, options);
  inv_freq_ = rope_inverse_frequencies(config_, device);
}

std::vector<std::pair<std::string, at::Tensor>> CausalLM::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", embed_tokens_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& layer = layers_[i];
    const std::string prefix = "model.layers." + std::to_string(i);
    out.emplace_back(prefix + ".input_layernorm.weight", layer.input_layernorm);
    add_linear(out, prefix + ".self_attn.q_proj", layer.q_proj);
    add_linear(out, prefix + ".self_attn.k_proj", layer.k_proj);
    add_linear(out, prefix + ".self_attn.v_proj", layer.v_proj);
    add_linear(out, prefix + ".self_attn.o_proj", layer.o_proj);
    if (layer.q_norm.defined()) {
      out.emplace_back(prefix + ".self_attn.q_norm.weight", layer.q_norm);
      out.emplace_back(prefix + ".self_attn.k_norm.weight", layer.k_norm);
    }
    add_linear(out, prefix + ".mlp.gate_proj", layer.gate_proj);
    add_linear(out, prefix + ".mlp.up_proj", layer.up_proj);
    add_linear(out, prefix + ".mlp.down_proj", layer.down_proj);
    out.emplace_back(prefix + ".post_attention_layernorm.weight", layer.post_attention_layernorm);
  }
  out.emplace_back("model.norm.weight", norm_);
  if (lm_head_.defined()) out.emplace_back("lm_head.weight", lm_head_);
  return out;
}

std::vector<std::pair<std::string, const Linear*>> CausalLM::named_linears() const {
  std::vector<std::pair<std::string, const Linear*>> out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& layer = layers_[i];
    const std::string prefix = "model.layers." + std::to_string(i);
    out.emplace_back(prefix + ".self_attn.q_proj", &layer.q_proj);
    out.emplace_back(prefix + ".self_attn.k_proj", &layer.k_proj);
    out.emplace_back(prefix + ".self_attn.v_proj", &layer.v_proj);
    out.emplace_back(prefix + ".self_attn.o_proj", &layer.o_proj);
    out.emplace_back(prefix + ".mlp.gate_proj", &layer.gate_proj);
    out.emplace_back(prefix + ".mlp.up_proj", &layer.up_proj);
    out.emplace_back(prefix + ".mlp.down_proj", &layer.down_proj);
  }
  return out;
}

std::vector<std::pair<std::string, Linear*>> CausalLM::named_linears() {
  std::vector<std::pair<std::string, Linear*>> out;
  for (auto& [name, linear] : std::as_const(*this).named_linears()) out.emplace_back(name, const_cast<Linear*>(linear));
  return out;
}

CausalLM::AttentionInputs CausalLM::attention_inputs(const DecoderLayer& layer, const at::Tensor& x,
                                                     const RopeTables& rope, bool training) const {
  const int64_t batch = x.size(0);
  const int64_t seq_len = x.size(1);
  const int64_t head_dim = config_.head_dim;
  const double eps = config_.rms_norm_eps;
  const bool fused_norm = kernels_.fused_rms_norm;
  auto q = linear_forward(layer.q_proj, x, training).view({batch, seq_len, -1, head_dim});
  auto k = linear_forward(layer.k_proj, x, training).view({batch, seq_len, -1, head_dim});
  auto v = linear_forward(layer.v_proj, x, training).view({batch, seq_len, -1, head_dim});
  if (config_.qk_norm) {
    q = rms_norm(q, layer.q_norm, eps, fused_norm);
    k = rms_norm(k, layer.k_norm, eps, fused_norm);
  }
  q = apply_rope(q, rope, kernels_.fused_elementwise);  // (B, T, H, D)
  k = apply_rope(k, rope, kernels_.fused_elementwise);  // (B, T, KV, D)
  return {q, k, v};
}

at::Tensor CausalLM::attention_output_and_mlp(const DecoderLayer& layer, const at::Tensor& hidden,
                                              const at::Tensor& attn, bool training) const {
  auto h = hidden + linear_forward(layer.o_proj, attn, training);
  auto x = rms_norm(h, layer.post_attention_layernorm, config_.rms_norm_eps, kernels_.fused_rms_norm);
  auto gate = linear_forward(layer.gate_proj, x, training);
  auto up = linear_forward(layer.up_proj, x, training);
  auto activation = kernels_.fused_elementwise ? fused_swiglu(gate, up) : at::silu(gate) * up;
  return h + linear_forward(layer.down_proj, activation, training);
}

at::Tensor CausalLM::layer_forward(const DecoderLayer& layer, const at::Tensor& hidden, const at::Tensor& cos,
                                   const at::Tensor& sin, const AttentionMask& mask, bool training) const {
  const int64_t batch = hidden.size(0);
  const int64_t seq_len = hidden.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim));
  auto x = rms_norm(hidden, layer.input_layernorm, config_.rms_norm_eps, kernels_.fused_rms_norm);  // (B, T, C)
  auto [q, k, v] = attention_inputs(layer, x, RopeTables{cos, sin}, training);
  at::Tensor attn;
  if (mask.variable_length()) {
    // One row of packed samples: (1, N, H, D) -> (N, H, D); flash attention handles GQA itself.
    auto flat = [](const at::Tensor& t) { return t.squeeze(0).contiguous(); };
    auto out = std::get<0>(at::_flash_attention_forward(flat(q), flat(k), flat(v), mask.cu_seqlens, mask.cu_seqlens,
                                                         mask.max_seqlen, mask.max_seqlen, 0.0, /*is_causal=*/true,
                                                         /*return_debug_mask=*/false, scale));  // (N, H, D)
    attn = out.reshape({batch, seq_len, -1});                                      // (1, N, H*D)
  } else {
    q = q.transpose(1, 2);  // (B, H, T, D)
    k = k.transpose(1, 2);  // (B, KV, T, D)
    v = v.transpose(1, 2);  // (B, KV, T, D)
    attn = mask.is_causal_only
               ? at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true, scale,
                                                  /*enable_gqa=*/true)
               : at::scaled_dot_product_attention(q, k, v, mask.mask, 0.0, /*is_causal=*/false, scale,
                                                  /*enable_gqa=*/true);
    attn = attn.transpose(1, 2).reshape({batch, seq_len, -1});  // (B, T, H*D)
  }
  return attention_output_and_mlp(layer, hidden, attn, training);
}

// attend: (B, 1, T, past + T), bool (true: attend) or, where the math kernel takes it, additive
// (0 / -inf); undefined for "every cached key, causally" (see forward_cached).
at::Tensor CausalLM::layer_forward_cached(const DecoderLayer& layer, const at::Tensor& hidden, const RopeTables& rope,
                                          at::Tensor& keys, at::Tensor& values, int64_t past,
                                          const at::Tensor& attend) const {
  const int64_t batch = hidden.size(0);
  const int64_t seq_len = hidden.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim));
  auto x = rms_norm(hidden, layer.input_layernorm, config_.rms_norm_eps, kernels_.fused_rms_norm);  // (B, T, C)
  auto [q, k, v] = attention_inputs(layer, x, rope, /*training=*/false);
  keys.narrow(2, past, seq_len).copy_(k.transpose(1, 2));    // (B, KV, T, D) into (B, KV, capacity, D)
  values.narrow(2, past, seq_len).copy_(v.transpose(1, 2));
  auto k_all = keys.narrow(2, 0, past + seq_len);            // (B, KV, past + T, D)
  auto v_all = values.narrow(2, 0, past + seq_len);
  // Without padding, one query (a decode step) sees every key, and a prompt from an empty cache
  // is plain causal attention: mask-free kernels serve both.
  const bool causal = !attend.defined() && seq_len > 1;
  if (!attend.defined() && kernels_.variable_length_attention) {
    // Flash attention directly (GQA inside, keys read through the cache's strides): SDPA would pick
    // cuDNN here, which builds a new plan for every key length, i.e. every decode step (~3.7 ms
    // of host time per layer and step on an H100, measured with --profile_start_step).
    auto out = std::get<0>(at::_flash_attention_forward(q, k_all.transpose(1, 2), v_all.transpose(1, 2), std::nullopt,
                                                         std::nullopt, seq_len, past + seq_len, 0.0, causal,
                                                         /*return_debug_mask=*/false, scale));  // (B, T, H, D)
    return attention_output_and_mlp(layer, hidden, out.reshape({batch, seq_len, -1}), /*training=*/false);
  }
  q = q.transpose(1, 2);                                     // (B, H, T, D)
  if (attend.defined() && kernels_.variable_length_attention) {
    // Left-padded rows on the GPU: SDPA's math kernel with the (additive) mask. Its backend choice
    // would be cuDNN too, with a new plan per key length (see above); flash takes no mask.
    auto out = std::get<0>(at::_scaled_dot_product_attention_math(q, k_all, v_all, attend, 0.0, false, std::nullopt,
                                                                  scale, /*enable_gqa=*/true));  // (B, H, T, D)
    return attention_output_and_mlp(layer, hidden, out.transpose(1, 2).reshape({batch, seq_len, -1}),
                                    /*training=*/false);
  }
  auto attn = attend.defined()
                  ? at::scaled_dot_product_attention(q, k_all, v_all, attend, 0.0, false, scale, /*enable_gqa=*/true)
                  : at::scaled_dot_product_attention(q, k_all, v_all, std::nullopt, 0.0, causal, scale,
                                                     /*enable_gqa=*/true);  // (B, H, T, D)
  attn = attn.transpose(1, 2).reshape({batch, seq_len, -1});                // (B, T, H*D)
  return attention_output_and_mlp(layer, hidden, attn, /*training=*/false);
}

at::Tensor CausalLM::forward_cached(const at::Tensor& input_ids, const at::Tensor& position_ids, KVCache& cache,
                                    const at::Tensor& key_mask) const {
  const int64_t seq_len = input_ids.size(1);
  const int64_t past = cache.length;
  const int64_t total = past + seq_len;
  if (static_cast<int64_t>(cache.keys.size()) != config_.num_hidden_layers || total > cache.capacity()) {
    throw Error("forward_cached: " + std::to_string(total) + " positions do not fit the KV cache (capacity " +
                std::to_string(cache.capacity()) + ")");
  }
  // Query i (absolute position past + i) attends to unpadded keys j <= past + i. A padding query
  // would attend to nothing; it attends to itself so softmax stays finite (its output is unused,
  // and no real query ever reads a padding key).
  at::Tensor attend;
  if (key_mask.defined() || (past > 0 && seq_len > 1)) {
    const auto options = at::TensorOptions().dtype(at::kLong).device(input_ids.device());
    auto query_position = at::arange(past, total, options).unsqueeze(1);  // (T, 1)
    auto key_position = at::arange(0, total, options).unsqueeze(0);       // (1, past + T)
    attend = key_position.le(query_position).unsqueeze(0);               // (1, T, past + T)
    if (key_mask.defined()) attend = attend & key_mask.to(at::kBool).unsqueeze(1);  // (B, T, past + T)
    attend = (attend | key_position.eq(query_position).unsqueeze(0)).unsqueeze(1);  // (B, 1, T, past + T)
    if (kernels_.variable_length_attention) {
      // The GPU's masked path calls SDPA's math kernel, which adds its mask: SDPA's front end turns
      // a bool mask into 0 / -inf first, so do we, once for every layer.
      attend = at::zeros(attend.sizes(), at::TensorOptions().dtype(dtype_).device(attend.device()))
                   .masked_fill(attend.logical_not(), -std::numeric_limits<double>::infinity());
    }
  }
  auto hidden = at::embedding(embed_tokens_, input_ids);  // (B, T, C)
  const auto tables = rope_tables(inv_freq_, position_ids, dtype_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    hidden = layer_forward_cached(layers_[i], hidden, tables, cache.keys[i], cache.values[i], past, attend);
  }
  cache.length = total;
  return rms_norm(hidden, norm_, config_.rms_norm_eps, kernels_.fused_rms_norm);
}

at::Tensor CausalLM::forward_hidden(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                    const AttentionMask& mask, const ForwardOptions& options) const {
  auto hidden = at::embedding(embed_tokens_, input_ids);  // (B, T, C)
  const auto tables = rope_tables(inv_freq_, position_ids, dtype_);
  const bool checkpoint = options.gradient_checkpointing && options.training && at::GradMode::is_enabled();
  if (checkpoint) hidden = hidden.detach().requires_grad_(true);  // lets layer 0's recompute node run
  // Only LoRA dropout draws random numbers inside a layer; without it the recompute needs no RNG replay.
  const bool layers_draw_random = checkpoint && adapters_draw_random_numbers();
  for (const auto& layer : layers_) {
    if (checkpoint) {
      const DecoderLayer* layer_ptr = &layer;
      const bool training = options.training;
      hidden = checkpointed_call(
          [this, layer_ptr, tables, mask, training](const at::Tensor& h) {
            return layer_forward(*layer_ptr, h, tables.cos, tables.sin, mask, training);
          },
          hidden, layers_draw_random);
    } else {
      hidden = layer_forward(layer, hidden, tables.cos, tables.sin, mask, options.training);
    }
  }
  return rms_norm(hidden, norm_, config_.rms_norm_eps, kernels_.fused_rms_norm);
}

bool CausalLM::adapters_draw_random_numbers() const {
  for (const auto& [name, linear] : named_linears()) {
    if (linear->adapter && linear->adapter->draws_random_numbers()) return true;
  }
  return false;
}

bool CausalLM::cuda_graph_safe() const {
  if (projections_4bit_) return false;
  for (const auto& [name, linear] : named_linears()) {
    if (linear->adapter && !linear->adapter->cuda_graph_safe()) return false;
  }
  return true;
}

const at::Tensor& CausalLM::lm_head_weight() const { return lm_head_.defined() ? lm_head_ : embed_tokens_; }

at::Tensor CausalLM::lm_head(const at::Tensor& hidden) const { return at::linear(hidden, lm_head_weight()); }

int64_t CausalLM::parameter_count() const {
  int64_t count = 0;
  for (const auto& [name, tensor] : named_parameters()) count += tensor.numel();
  for (const auto& [name, linear] : named_linears()) {
    if (linear->is_4bit()) count += linear->in_features() * linear->out_features();
  }
  return count;
}

}  // namespace finetune
