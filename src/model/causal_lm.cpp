#include "finetune/model/causal_lm.h"

#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "finetune/model/attention_kernels.h"
#include "finetune/model/checkpoint_function.h"
#include "finetune/model/head_group_attention.h"
#include "finetune/model/rms_norm.h"
#include "finetune/model/rope.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

void add_linear(std::vector<std::pair<std::string, at::Tensor>>& out, const std::string& prefix,
                const Linear& layer) {
  if (!layer.weight.is_meta()) out.emplace_back(prefix + ".weight", layer.weight);
  if (layer.bias.defined()) out.emplace_back(prefix + ".bias", layer.bias);
}

// A MoE layer's MLP tensors in HF's parameter order (Note [Expert tensors] in architecture.h).
void add_moe_parameters(std::vector<std::pair<std::string, at::Tensor>>& out, const std::string& prefix,
                        const MoeLayout& layout, const MoeLayer& moe) {
  if (!moe.sparse) {
    for (size_t m = 0; m < moe.dense_mlp.size(); ++m)
      add_linear(out, prefix + layout.dense_mlp_modules[m].path, moe.dense_mlp[m]);
    return;
  }
  out.emplace_back(prefix + layout.experts + ".gate_up_proj", moe.gate_up_proj.weight);
  out.emplace_back(prefix + layout.experts + ".down_proj", moe.down_proj.weight);
  out.emplace_back(prefix + layout.router + ".weight", moe.router);
}

// make(spec) for a full layer's attention ([0]) and a sliding layer's ([1]): what every layer of
// that kind shares within one forward.
template <typename Make>
auto per_layer_kind(const ModelConfig& config, const Make& make) {
  using Value = decltype(make(AttentionSpec{}));
  return std::array<Value, 2>{make(attention_spec(config, false)), make(attention_spec(config, true))};
}

}  // namespace

CausalLM::CausalLM(ModelConfig config, at::ScalarType dtype, at::Device device, bool projections_4bit,
                   const KernelRequests& kernel_requests)
    : config_(std::move(config)), architecture_(&architecture_of(config_)),
      composition_(&decoder_composition(architecture_->id)), layout_(*architecture_, config_), dtype_(dtype),
      device_(device), projections_4bit_(projections_4bit),
      kernels_(choose_kernel_policy(device, dtype, config_, kernel_requests)) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  embed_tokens_ = at::empty({config_.vocab_size, config_.hidden_size}, options);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    layers_.push_back(make_decoder_layer(*architecture_, config_, options, projections_4bit));
    if (architecture_->moe) {
      layers_.back().moe =
          std::make_shared<MoeLayer>(make_moe_layer(*architecture_, config_, i, options, projections_4bit));
    }
  }
  norm_ = at::empty({config_.hidden_size}, options);
  if (!config_.tie_word_embeddings) lm_head_ = at::empty({config_.vocab_size, config_.hidden_size}, options);
  rope_ = rope_frequencies(config_, device);
  if (config_.rope_local_base_freq) {
    ModelConfig local = config_;  // Gemma-3's sliding layers: their own base, unscaled
    local.rope_theta = *config_.rope_local_base_freq;
    local.rope_scaling = RopeScaling{};
    local_rope_ = rope_frequencies(local, device);
  }
}

std::vector<std::pair<std::string, at::Tensor>> CausalLM::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back(architecture_->embed_tokens, embed_tokens_);
  const auto& modules = architecture_->layer_modules;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string prefix = architecture_->layer_prefix + std::to_string(i) + ".";
    for (size_t m = 0; m < modules.size(); ++m) {
      const auto& tensors = layers_[i].modules[m];
      if (modules[m].is_projection()) {
        add_linear(out, prefix + modules[m].path, tensors.projection);
      } else {
        out.emplace_back(prefix + modules[m].path + ".weight", tensors.norm_weight);
      }
    }
    if (const auto& moe = layers_[i].moe) add_moe_parameters(out, prefix, *architecture_->moe, *moe);
  }
  out.emplace_back(architecture_->final_norm, norm_);
  if (lm_head_.defined()) out.emplace_back(architecture_->lm_head, lm_head_);
  return out;
}

std::vector<std::pair<std::string, const Linear*>> CausalLM::named_linears() const {
  std::vector<std::pair<std::string, const Linear*>> out;
  const auto& modules = architecture_->layer_modules;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string prefix = architecture_->layer_prefix + std::to_string(i) + ".";
    for (size_t m = 0; m < modules.size(); ++m) {
      if (modules[m].is_projection()) out.emplace_back(prefix + modules[m].path, &layers_[i].modules[m].projection);
    }
    if (const auto& moe = layers_[i].moe) {
      for (size_t m = 0; m < moe->dense_mlp.size(); ++m)
        out.emplace_back(prefix + architecture_->moe->dense_mlp_modules[m].path, &moe->dense_mlp[m]);
    }
  }
  return out;
}

std::vector<std::pair<std::string, const ExpertStack*>> CausalLM::named_expert_stacks() const {
  std::vector<std::pair<std::string, const ExpertStack*>> out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& moe = layers_[i].moe;
    if (!moe || !moe->sparse) continue;
    const std::string experts = architecture_->layer_prefix + std::to_string(i) + "." + architecture_->moe->experts;
    out.emplace_back(experts + ".gate_up_proj", &moe->gate_up_proj);
    out.emplace_back(experts + ".down_proj", &moe->down_proj);
  }
  return out;
}

std::vector<std::pair<std::string, ExpertStack*>> CausalLM::named_expert_stacks() {
  std::vector<std::pair<std::string, ExpertStack*>> out;
  for (auto& [name, stack] : std::as_const(*this).named_expert_stacks())
    out.emplace_back(name, const_cast<ExpertStack*>(stack));
  return out;
}

std::vector<std::pair<std::string, Linear*>> CausalLM::named_linears() {
  std::vector<std::pair<std::string, Linear*>> out;
  for (auto& [name, linear] : std::as_const(*this).named_linears()) out.emplace_back(name, const_cast<Linear*>(linear));
  return out;
}

at::Tensor CausalLM::embed(const at::Tensor& input_ids) const {
  auto hidden = at::embedding(embed_tokens_, input_ids);  // (B, T, C)
  return composition_->scale_embeddings ? composition_->scale_embeddings(hidden, config_) : hidden;
}

at::Tensor CausalLM::layer_forward(const DecoderLayer& layer, const at::Tensor& hidden, const RopeTables& rope,
                                   const AttentionKernel& kernel, bool training,
                                   std::vector<at::Tensor>* router_logits, int64_t mlp_tile_bytes,
                                   const std::function<void()>& after_mlp_backward) const {
  const LayerContext context{layout_, config_, kernels_, rope, kernel, training, architecture_->rms_norm_unit_offset,
                             router_logits, mlp_tile_bytes, after_mlp_backward};
  return composition_->layer(layer, hidden, context);
}

at::Tensor CausalLM::final_norm(const at::Tensor& hidden) const {
  if (architecture_->rms_norm_unit_offset) return rms_norm_unit_offset(hidden, norm_, config_.rms_norm_eps);
  return rms_norm(hidden, norm_, config_.rms_norm_eps, kernels_.fused_rms_norm);
}

AttentionKernel CausalLM::attention_kernel(const AttentionMask& mask, const AttentionSpec& spec, int64_t seq_len) const {
  // The padded paths read the window from the mask; the padding-free ones take it themselves.
  const AttentionMask windowed =
      spec.window ? with_sliding_window(mask, *spec.window, seq_len, device_) : mask;
  // Note [Soft-capped attention]: the row's chunks, planned once for every layer of this kind.
  const auto packed_plan = windowed.variable_length() && spec.softcap
                               ? std::make_shared<const PackedAttentionPlan>(plan_packed_attention(
                                     windowed.sample_lengths, config_.num_attention_heads, spec, device_))
                               : nullptr;
  // Note [Head-grouped cuDNN attention]: the long rows' kernel, for this row and layer kind.
  const auto group_kernel =
      head_group_kernel_for(kernels_.long_row_attention, windowed.sample_lengths, seq_len,
                            config_.num_attention_heads * config_.head_dim, spec.window.has_value());
  return [windowed, spec, packed_plan, group_kernel](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const int64_t batch = q.size(0);
    const int64_t seq_len = q.size(1);
    if (windowed.variable_length()) {
      // One row of packed samples: (1, N, H, D) -> (N, H, D); flash attention handles GQA itself.
      auto flat = [](const at::Tensor& t) { return t.squeeze(0).contiguous(); };
      if (packed_plan) {  // Note [Soft-capped attention]
        return packed_eager_attention(flat(q), flat(k), flat(v), *packed_plan, spec).reshape({batch, seq_len, -1});
      }
      const auto [left, right] = flash_window(spec);  // Note [Sliding window]
      const auto q_rows = flat(q), k_rows = flat(k), v_rows = flat(v);
      const int64_t scratch = head_group_attention_scratch_bytes(q_rows.size(0), q_rows.size(1), k_rows.size(1),
                                                                 q_rows.size(2), q_rows.element_size());
      if (at::GradMode::is_enabled() && scratch > kHeadGroupAttentionBytes) {  // Note [Head-grouped flash attention]
        const HeadGroupArgs args{windowed.cu_seqlens, windowed.max_seqlen, spec.scale, left, right, group_kernel};
        return head_grouped_attention(q_rows, k_rows, v_rows, args).reshape({batch, seq_len, -1});
      }
      auto out = std::get<0>(at::_flash_attention_forward(
          q_rows, k_rows, v_rows, windowed.cu_seqlens, windowed.cu_seqlens, windowed.max_seqlen,
          windowed.max_seqlen, 0.0, /*is_causal=*/true, /*return_debug_mask=*/false, spec.scale, left, right));  // (N, H, D)
      return out.reshape({batch, seq_len, -1});  // (1, N, H*D)
    }
    const auto qt = q.transpose(1, 2);  // (B, H, T, D)
    const auto kt = k.transpose(1, 2);  // (B, KV, T, D)
    const auto vt = v.transpose(1, 2);
    if (spec.softcap) {
      const auto allowed = windowed.is_causal_only ? causal_keys(seq_len, 0, q.device()) : windowed.mask;
      return eager_attention(qt, kt, vt, allowed, spec).transpose(1, 2).reshape({batch, seq_len, -1});
    }
    auto attn = windowed.is_causal_only
                    ? at::scaled_dot_product_attention(qt, kt, vt, std::nullopt, 0.0, /*is_causal=*/true, spec.scale,
                                                       /*enable_gqa=*/true)
                    : at::scaled_dot_product_attention(qt, kt, vt, windowed.mask, 0.0, /*is_causal=*/false, spec.scale,
                                                       /*enable_gqa=*/true);  // (B, H, T, D)
    return attn.transpose(1, 2).reshape({batch, seq_len, -1});                // (B, T, H*D)
  };
}

// mask: (B, 1, T, past + T), the spec's window included: bool (true: attend) or, on the GPU's
// masked path, additive (0 / -inf); undefined for "every cached key, causally" (see forward_cached).
AttentionKernel CausalLM::cached_attention_kernel(at::Tensor& keys, at::Tensor& values, int64_t past,
                                                  const at::Tensor& mask, const AttentionSpec& spec) const {
  const bool flash = kernels_.variable_length_attention && !spec.softcap;
  return [&keys, &values, past, mask, spec, flash](const at::Tensor& q_in, const at::Tensor& k, const at::Tensor& v) {
    const int64_t batch = q_in.size(0);
    const int64_t seq_len = q_in.size(1);
    keys.narrow(2, past, seq_len).copy_(k.transpose(1, 2));  // (B, KV, T, D) into (B, KV, capacity, D)
    values.narrow(2, past, seq_len).copy_(v.transpose(1, 2));
    auto k_all = keys.narrow(2, 0, past + seq_len);          // (B, KV, past + T, D)
    auto v_all = values.narrow(2, 0, past + seq_len);
    const auto q = q_in.transpose(1, 2);  // (B, H, T, D)
    if (spec.softcap) {  // Note [Soft-capped attention]
      const auto allowed = mask.defined() ? mask : causal_keys(seq_len, past, q.device());
      return eager_attention(q, k_all, v_all, allowed, spec).transpose(1, 2).reshape({batch, seq_len, -1});
    }
    // Without padding, one query (a decode step) sees every key, and a prompt from an empty cache
    // is plain causal attention: mask-free kernels serve both.
    const bool causal = !mask.defined() && seq_len > 1;
    if (!mask.defined() && flash) {
      // Flash attention directly (GQA inside, keys read through the cache's strides): SDPA would
      // pick cuDNN here, which builds a new plan for every key length, i.e. every decode step
      // (~3.7 ms of host time per layer and step on an H100, measured with --profile_start_step).
      const auto [left, right] = flash_window(spec);  // Note [Sliding window]
      auto out = std::get<0>(at::_flash_attention_forward(q_in, k_all.transpose(1, 2), v_all.transpose(1, 2),
                                                           std::nullopt, std::nullopt, seq_len, past + seq_len, 0.0,
                                                           causal, /*return_debug_mask=*/false, spec.scale, left,
                                                           right));  // (B, T, H, D)
      return out.reshape({batch, seq_len, -1});
    }
    if (mask.defined() && flash) {
      // Left-padded rows on the GPU: SDPA's math kernel with the (additive) mask. Its backend
      // choice would be cuDNN too, with a new plan per key length (see above); flash takes no mask.
      auto out = std::get<0>(at::_scaled_dot_product_attention_math(q, k_all, v_all, mask, 0.0, false, std::nullopt,
                                                                    spec.scale, /*enable_gqa=*/true));  // (B, H, T, D)
      return out.transpose(1, 2).reshape({batch, seq_len, -1});
    }
    auto attn = mask.defined()
                    ? at::scaled_dot_product_attention(q, k_all, v_all, mask, 0.0, false, spec.scale, /*enable_gqa=*/true)
                    : at::scaled_dot_product_attention(q, k_all, v_all, std::nullopt, 0.0, causal, spec.scale,
                                                       /*enable_gqa=*/true);  // (B, H, T, D)
    return attn.transpose(1, 2).reshape({batch, seq_len, -1});                // (B, T, H*D)
  };
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
  }
  // A sliding layer's keys: the window's (Note [Sliding window]); on the mask-free flash path the
  // kernel applies it itself.
  // The GPU's masked path calls SDPA's math kernel, which adds its mask: SDPA's front end turns a
  // bool mask into 0 / -inf first, so do we, once per kind of layer.
  const auto mask_of = [&](const AttentionSpec& spec) {
    const bool flash = kernels_.variable_length_attention && !spec.softcap;
    at::Tensor mask = attend;
    if (spec.window && total > *spec.window && (attend.defined() || !flash))
      mask = sliding_window_keys(attend, *spec.window, seq_len, past, input_ids.device());
    if (!mask.defined() || !flash) return mask;
    return at::zeros(mask.sizes(), at::TensorOptions().dtype(dtype_).device(mask.device()))
        .masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  };
  auto hidden = embed(input_ids);  // (B, T, C)
  const auto tables = rope_tables(rope_, position_ids, dtype_);
  const auto local_tables = local_rope_.inv_freq.defined() ? rope_tables(local_rope_, position_ids, dtype_) : tables;
  const auto layer_masks = per_layer_kind(config_, mask_of);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const bool sliding = layer_is_sliding(config_, static_cast<int64_t>(i));
    const auto kernel = cached_attention_kernel(cache.keys[i], cache.values[i], past, layer_masks[sliding ? 1 : 0],
                                                attention_spec(config_, sliding));
    hidden = layer_forward(layers_[i], hidden, sliding ? local_tables : tables, kernel, /*training=*/false);
  }
  cache.length = total;
  return final_norm(hidden);
}

at::Tensor CausalLM::forward_hidden(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                    const AttentionMask& mask, const ForwardOptions& options) const {
  auto hidden = embed(input_ids);  // (B, T, C)
  // Where transformers' NEFTune hook adds it: to get_input_embeddings()' output, Gemma's scale included.
  if (options.training && options.embedding_noise) hidden = add_embedding_noise(hidden, *options.embedding_noise);
  const auto tables = rope_tables(rope_, position_ids, dtype_);
  const auto local_tables = local_rope_.inv_freq.defined() ? rope_tables(local_rope_, position_ids, dtype_) : tables;
  // One kernel per kind of layer (full, sliding), built once for every layer of its kind.
  const auto kernels = per_layer_kind(config_, [&](const AttentionSpec& spec) { return attention_kernel(mask, spec, input_ids.size(1)); });
  const bool checkpoint = options.gradient_checkpointing && options.training && at::GradMode::is_enabled();
  if (checkpoint && options.router_logits)
    throw Error("the router load-balancing loss (output_router_logits) needs the router logits of the forward; "
                "gradient checkpointing would recompute them in backward: turn one of them off");
  if (checkpoint) hidden = hidden.detach().requires_grad_(true);  // lets layer 0's recompute node run
  // Only LoRA dropout draws random numbers inside a layer; without it the recompute needs no RNG replay.
  const bool layers_draw_random = checkpoint && adapters_draw_random_numbers();
  const auto offloader = checkpoint ? activation_offloader(hidden, options) : nullptr;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const bool sliding = layer_is_sliding(config_, static_cast<int64_t>(i));
    const auto& kernel = kernels[sliding ? 1 : 0];
    const auto& layer_tables = sliding ? local_tables : tables;
    if (checkpoint) {
      // The recompute runs in backward, after this function returns: capture by value.
      const DecoderLayer* layer_ptr = &layers_[i];
      const bool training = options.training;
      const int64_t mlp_tile_bytes = options.mlp_tile_bytes;
      hidden = checkpointed_call(
          [this, layer_ptr, layer_tables, kernel, training, mlp_tile_bytes](
              const at::Tensor& h, const std::function<void()>& after_mlp_backward) {
            return layer_forward(*layer_ptr, h, layer_tables, kernel, training, nullptr, mlp_tile_bytes,
                                 after_mlp_backward);
          },
          hidden, layers_draw_random, offloader);
    } else {
      hidden = layer_forward(layers_[i], hidden, layer_tables, kernel, options.training, options.router_logits,
                             options.mlp_tile_bytes);
    }
  }
  return final_norm(hidden);
}

std::shared_ptr<ActivationOffloader> CausalLM::activation_offloader(const at::Tensor& embedded,
                                                                  const ForwardOptions& options) const {
  if (!options.offload_activations_above_bytes) return nullptr;
  const int64_t input_bytes = embedded.numel() * static_cast<int64_t>(embedded.element_size()) *
                              static_cast<int64_t>(layers_.size());  // every layer's checkpointed input
  if (input_bytes <= *options.offload_activations_above_bytes) return nullptr;
  return std::make_shared<ActivationOffloader>(device_, options.offload_arena);
}

bool CausalLM::adapters_draw_random_numbers() const {
  for (const auto& [name, linear] : named_linears()) {
    if (linear->adapter && linear->adapter->draws_random_numbers()) return true;
  }
  return false;
}

bool CausalLM::cuda_graph_safe() const {
  // 4-bit projections dequantize into fresh tensors in every use (Note [4-bit base weights]): from
  // the graph's pool in a replay. 4-bit expert stacks stay eager (moe_layer_graph_safe).
  // Soft-capped attention walks the samples' lengths on the host (Note [Soft-capped attention]).
  if (config_.attn_logit_softcapping) return false;
  for (const auto& layer : layers_) {
    if (layer.moe && !moe_layer_graph_safe(*layer.moe, device_)) return false;  // Note [Graphed expert routing]
  }
  for (const auto& [name, linear] : named_linears()) {
    if (linear->adapter && !linear->adapter->cuda_graph_safe()) return false;
  }
  return true;
}

const at::Tensor& CausalLM::lm_head_weight() const { return lm_head_.defined() ? lm_head_ : embed_tokens_; }

OutputHead CausalLM::output_head() const {
  OutputHead head;
  head.weight = lm_head_weight();
  if (composition_->final_logit_softcapping) head.final_logit_softcapping = composition_->final_logit_softcapping(config_);
  return head;
}

at::Tensor CausalLM::lm_head(const at::Tensor& hidden) const {
  const auto head = output_head();
  auto logits = at::linear(hidden, head.weight);  // (..., V)
  if (!head.final_logit_softcapping) return logits;
  const double cap = *head.final_logit_softcapping;
  return at::tanh(logits / cap) * cap;
}

int64_t CausalLM::parameter_count() const {
  int64_t count = 0;
  for (const auto& [name, tensor] : named_parameters()) count += tensor.numel();
  for (const auto& [name, linear] : named_linears()) {
    if (linear->is_4bit()) count += linear->in_features() * linear->out_features();
  }
  return count;  // expert stacks, 4-bit ones included, are named_parameters (meta-shaped when 4-bit)
}

}  // namespace finetune
