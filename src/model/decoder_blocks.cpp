#include "finetune/model/decoder_blocks.h"

#include <algorithm>

#include "finetune/model/fused_kernels.h"
#include "finetune/model/rms_norm.h"
#include "finetune/model/swiglu.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Which projections carry a bias, as the config records each modeling_*.py's choice.
bool role_has_bias(ModuleRole role, const ModelConfig& config) {
  switch (role) {
    case ModuleRole::kQuery:
    case ModuleRole::kKey:
    case ModuleRole::kValue: return config.attention_bias;
    case ModuleRole::kAttentionOutput: return config.attention_output_bias;
    default: return config.mlp_bias;
  }
}

// A 4-bit projection's weight is a meta tensor (its shape, no storage) until the loader gives it
// the 4-bit one (weights/model_weights.h): the dense weight never exists on the device.
Linear make_linear(const std::vector<int64_t>& shape, bool bias, const at::TensorOptions& options, bool weight_4bit) {
  Linear layer;
  layer.compute_dtype = c10::typeMetaToScalarType(options.dtype());
  layer.weight = at::empty(shape, weight_4bit ? options.device(at::kMeta) : options);
  if (bias) layer.bias = at::empty({shape[0]}, options);
  return layer;
}


at::Tensor swiglu_mlp(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context) {
  auto gate_up = projection_block(layer, {ModuleRole::kGate, ModuleRole::kUp}, x, context);
  const int down = context.layout.slot(ModuleRole::kDown).module;
  const Linear& down_projection = layer.modules[down].projection;
  // The adapter forms silu(gate) * up itself where it can, keeping gate and up instead of the
  // product (LinearAdapter::forward_swiglu); gate and up are this call's own, nothing reads them after.
  if (down_projection.adapter && context.layout.split_sizes[down].size() == 1) {
    auto y = down_projection.adapter->forward_swiglu(down_projection, gate_up[0], gate_up[1], context.training);
    if (y.defined()) return y;
  }
  const auto activation = swiglu(gate_up[0], gate_up[1], context.kernels);
  return projection_block(layer, {ModuleRole::kDown}, activation, context)[0];
}

at::Tensor geglu_mlp(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context) {
  auto gate_up = projection_block(layer, {ModuleRole::kGate, ModuleRole::kUp}, x, context);
  auto activation = at::gelu(gate_up[0], "tanh") * gate_up[1];
  return projection_block(layer, {ModuleRole::kDown}, activation, context)[0];
}

using MlpFunction = at::Tensor (*)(const DecoderLayer&, const at::Tensor&, const LayerContext&);

// The MLP projections' modules (a fused gate_up once), as indices into DecoderLayer::modules.
std::vector<int> mlp_modules(const LayerLayout& layout) {
  std::vector<int> modules;
  for (const ModuleRole role : {ModuleRole::kGate, ModuleRole::kUp, ModuleRole::kDown}) {
    const int module = layout.slot(role).module;
    if (module >= 0 && std::find(modules.begin(), modules.end(), module) == modules.end()) modules.push_back(module);
  }
  return modules;
}

// What the MLP trains: its adapters' tensors and any base tensor that requires grad (--bias).
std::vector<at::Tensor> mlp_trained_tensors(const DecoderLayer& layer, const LayerLayout& layout) {
  std::vector<at::Tensor> tensors;
  for (const int module : mlp_modules(layout)) {
    const Linear& projection = layer.modules[module].projection;
    for (const auto& base : {projection.weight, projection.bias}) {
      if (base.defined() && base.requires_grad()) tensors.push_back(base);
    }
    if (!projection.adapter) continue;
    for (const auto& [name, tensor] : projection.adapter->named_parameters()) tensors.push_back(tensor);
  }
  return tensors;
}

bool mlp_draws_random_numbers(const DecoderLayer& layer, const LayerContext& context) {
  if (!context.training) return false;
  for (const int module : mlp_modules(context.layout)) {
    const auto& adapter = layer.modules[module].projection.adapter;
    if (adapter && adapter->draws_random_numbers()) return true;
  }
  return false;
}

// x (B, T, C) -> mlp(x) (B, T, C), over the tokens in tiles when the intermediates of all of them
// would exceed context.mlp_tile_bytes (Note [Sequence-tiled MLP]).
at::Tensor sequence_tiled_mlp(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context,
                              MlpFunction mlp) {
  const int64_t hidden = x.size(-1);
  const int64_t tokens = x.numel() / hidden;
  const int64_t tile_tokens = mlp_tile_tokens(context.config.intermediate_size, x.scalar_type(), context.mlp_tile_bytes);
  if (tokens <= tile_tokens) return mlp(layer, x, context);
  // Backward recomputes tiles after this layer's forward returned: the closure holds its own copy
  // of the context, whose layout, config and kernels are the model's (alive as long as it is); the
  // MLP reads nothing else of it.
  const DecoderLayer* layer_ptr = &layer;
  const LayerContext captured = context;
  auto per_token = [layer_ptr, captured, mlp](const at::Tensor& rows) { return mlp(*layer_ptr, rows, captured); };
  auto out = tiled_token_call(per_token, x.reshape({tokens, hidden}), tile_tokens,
                              mlp_trained_tensors(layer, context.layout), mlp_draws_random_numbers(layer, context));
  auto sizes = x.sizes().vec();
  sizes.back() = out.size(1);
  return out.view(sizes);
}

}  // namespace

LayerLayout::LayerLayout(const Architecture& architecture, const ModelConfig& config) {
  for (size_t m = 0; m < architecture.layer_modules.size(); ++m) {
    const auto& module = architecture.layer_modules[m];
    split_sizes.push_back(layer_module_split_sizes(module, config));
    for (size_t output = 0; output < module.roles.size(); ++output) {
      auto& slot = slots[static_cast<int>(module.roles[output])];
      if (slot.module >= 0) throw Error(module.path + ": a second module with the same role in the architecture table");
      slot = {static_cast<int>(m), static_cast<int>(output)};
    }
  }
}

DecoderLayer make_decoder_layer(const Architecture& architecture, const ModelConfig& config,
                                const at::TensorOptions& options, bool projections_4bit) {
  DecoderLayer layer;
  layer.modules.resize(architecture.layer_modules.size());
  for (size_t m = 0; m < architecture.layer_modules.size(); ++m) {
    const auto& module = architecture.layer_modules[m];
    const auto shape = layer_module_weight_shape(module, config);
    if (module.is_projection()) {
      layer.modules[m].projection =
          make_linear(shape, role_has_bias(module.roles.front(), config), options, projections_4bit);
    } else {
      layer.modules[m].norm_weight = at::empty(shape, options);
    }
  }
  return layer;
}

at::Tensor norm_block(const DecoderLayer& layer, ModuleRole role, const at::Tensor& x, const LayerContext& context) {
  const auto& weight = layer.modules[context.layout.slot(role).module].norm_weight;
  if (context.unit_offset_norms) return rms_norm_unit_offset(x, weight, context.config.rms_norm_eps);
  return rms_norm(x, weight, context.config.rms_norm_eps, context.kernels.fused_rms_norm);
}

std::vector<at::Tensor> projection_block(const DecoderLayer& layer, const std::vector<ModuleRole>& roles,
                                         const at::Tensor& x, const LayerContext& context) {
  // A fused module serves several roles: run it once, at its first role, and split its rows.
  std::vector<std::pair<int, std::vector<at::Tensor>>> computed;  // (module, outputs)
  std::vector<at::Tensor> out;
  for (ModuleRole role : roles) {
    const auto& slot = context.layout.slot(role);
    const std::vector<at::Tensor>* outputs = nullptr;
    for (const auto& [module, tensors] : computed) {
      if (module == slot.module) outputs = &tensors;
    }
    if (!outputs) {
      auto y = linear_forward(layer.modules[slot.module].projection, x, context.training);
      const auto& sizes = context.layout.split_sizes[slot.module];
      std::vector<at::Tensor> pieces{y};
      if (sizes.size() > 1) {
        pieces.clear();  // contiguous pieces: the fused elementwise kernels read contiguous memory
        for (const auto& piece : y.split_with_sizes(sizes, -1)) pieces.push_back(piece.contiguous());
      }
      computed.emplace_back(slot.module, std::move(pieces));
      outputs = &computed.back().second;
    }
    out.push_back((*outputs)[slot.output]);
  }
  return out;
}

namespace {

// Queries or keys (B, T, heads, D) through their per-head norm where the layer has one (Qwen3's
// q_norm / k_norm), then RoPE: one fused kernel where the policy asks for it and the shapes allow.
at::Tensor normed_and_rotated(const DecoderLayer& layer, ModuleRole norm_role, const at::Tensor& x,
                              const LayerContext& context) {
  if (!context.layout.has(norm_role)) return apply_rope(x, context.rope, context.kernels.fused_elementwise);
  const auto& weight = layer.modules[context.layout.slot(norm_role).module].norm_weight;
  // The policy asks for it only with the fused RMSNorm, which (1 + w) norms do not take.
  if (context.kernels.fused_norm_rope && fused_norm_rope_supported(x, weight, context.rope.cos)) {
    return fused_norm_rope(x, weight, context.config.rms_norm_eps, context.rope.cos, context.rope.sin);
  }
  return apply_rope(norm_block(layer, norm_role, x, context), context.rope, context.kernels.fused_elementwise);
}

}  // namespace

at::Tensor attention_block(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context) {
  const int64_t batch = x.size(0);
  const int64_t seq_len = x.size(1);
  const int64_t head_dim = context.config.head_dim;
  auto qkv = projection_block(layer, {ModuleRole::kQuery, ModuleRole::kKey, ModuleRole::kValue}, x, context);
  auto q = qkv[0].view({batch, seq_len, -1, head_dim});
  auto k = qkv[1].view({batch, seq_len, -1, head_dim});
  auto v = qkv[2].view({batch, seq_len, -1, head_dim});
  q = normed_and_rotated(layer, ModuleRole::kQueryNorm, q, context);  // (B, T, H, D)
  k = normed_and_rotated(layer, ModuleRole::kKeyNorm, k, context);    // (B, T, KV, D)
  const auto attention = context.attention_kernel(q, k, v);            // (B, T, H*D)
  return projection_block(layer, {ModuleRole::kAttentionOutput}, attention, context)[0];
}

at::Tensor attention_residual(const at::Tensor& h, const LayerContext& context) {
  if (!context.after_mlp_backward || !h.requires_grad()) return h;
  // A non-leaf tensor's hook runs with its gradient summed over its uses (the MLP and the
  // residual), before its node back-propagates: after the MLP's backward, before the attention's.
  h.register_hook([after_mlp_backward = context.after_mlp_backward](const at::Tensor&) { after_mlp_backward(); });
  return h;
}

at::Tensor swiglu_mlp_block(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context) {
  return sequence_tiled_mlp(layer, x, context, swiglu_mlp);
}

at::Tensor geglu_mlp_block(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context) {
  return sequence_tiled_mlp(layer, x, context, geglu_mlp);
}

}  // namespace finetune
