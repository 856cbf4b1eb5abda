// The building blocks every decoder architecture composes (decoder_composition.h): RMSNorm,
// attention (projections, q/k norms, RoPE, the attention kernel, output projection) and the gated
// MLPs (SwiGLU, GeGLU), as llama.cpp's build_norm / build_attn / build_ffn. A block finds its tensors by role in a
// DecoderLayer laid out by the architecture table (architecture.h), so it works unchanged for
// any naming and for fused projections (Note [Fused projections]).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/model/architecture.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/model/linear.h"
#include "finetune/model/rope.h"
#include "finetune/model/sequence_tiling.h"

namespace finetune {

// One module's tensors: a norm's weight, or a projection's Linear.
struct LayerModuleTensors {
  at::Tensor norm_weight;  // (size); undefined for a projection
  Linear projection;       // weight undefined for a norm
};

struct MoeLayer;  // model/moe_block.h

// One decoder layer: one entry per module of its architecture's layer_modules, in that order,
// and a mixture-of-experts architecture's MLP (sparse or dense; null for other architectures).
struct DecoderLayer {
  std::vector<LayerModuleTensors> modules;
  std::shared_ptr<MoeLayer> moe;
};

// Where each role lives in a DecoderLayer, resolved once per model from the table.
struct LayerLayout {
  struct Slot {
    int module = -1;  // index into DecoderLayer::modules; -1: the architecture has no such role
    int output = 0;   // which of a fused module's outputs
  };
  std::array<Slot, kModuleRoleCount> slots;
  std::vector<std::vector<int64_t>> split_sizes;  // per module: its outputs' sizes (one when unfused)

  LayerLayout(const Architecture& architecture, const ModelConfig& config);
  const Slot& slot(ModuleRole role) const { return slots[static_cast<int>(role)]; }
  bool has(ModuleRole role) const { return slot(role).module >= 0; }
};

// A layer with uninitialised tensors of `options` (4-bit projections: shape-only weights, Note [4-bit
// base weights] in linear.h).
DecoderLayer make_decoder_layer(const Architecture& architecture, const ModelConfig& config,
                                const at::TensorOptions& options, bool projections_4bit);

// The attention kernel between the projections: q (B, T, H, D) after norms and RoPE, k and v
// (B, T, KV, D) -> (B, T, H*D). The model picks one per forward (padded, variable-length or
// KV-cached).
using AttentionKernel = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)>;

// What a layer's blocks share within one forward.
struct LayerContext {
  const LayerLayout& layout;
  const ModelConfig& config;
  const KernelPolicy& kernels;
  const RopeTables& rope;
  const AttentionKernel& attention_kernel;
  bool training;
  bool unit_offset_norms = false;  // Architecture::rms_norm_unit_offset: norms scale by (1 + weight)
  std::vector<at::Tensor>* router_logits = nullptr;  // where sparse layers append their router logits, when asked
  // The MLPs run over the tokens in tiles whose intermediates stay within this many bytes, when the
  // whole input would exceed it (Note [Sequence-tiled MLP] in model/sequence_tiling.cpp).
  int64_t mlp_tile_bytes = kMlpTileBytes;
  // Called once the layer's MLP has back-propagated (attention_residual), when set: a layer
  // recompute's cue to start bringing back the previous layer's offloaded input (checkpoint_function.h).
  std::function<void()> after_mlp_backward = nullptr;
};

// The attention's residual sum h, the MLP's input and residual, with context.after_mlp_backward
// called when h's gradient is complete (the MLP's backward done, the attention's not begun) where
// it is set and h requires grad; h itself otherwise.
at::Tensor attention_residual(const at::Tensor& h, const LayerContext& context);

// RMSNorm by the weight of `role` (Gemma's (1 + weight) form under unit_offset_norms): x (..., C) -> (..., C).
at::Tensor norm_block(const DecoderLayer& layer, ModuleRole role, const at::Tensor& x, const LayerContext& context);

// The projections of `roles`, each module run once (a fused one split): x (..., in) -> one
// (..., out) per role, in the order given.
std::vector<at::Tensor> projection_block(const DecoderLayer& layer, const std::vector<ModuleRole>& roles,
                                         const at::Tensor& x, const LayerContext& context);

// Attention without its residual: x (B, T, C), already normed -> o_proj(attention) (B, T, C).
at::Tensor attention_block(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context);

// The gated MLP with SiLU (SwiGLU): x (B, T, C), already normed -> down(silu(gate(x)) * up(x)).
// Both MLPs run over the tokens in tiles when their intermediates would exceed
// context.mlp_tile_bytes (Note [Sequence-tiled MLP]); below that, as one call.
at::Tensor swiglu_mlp_block(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context);

// The gated MLP with tanh-approximated GELU (GeGLU, Gemma's gelu_pytorch_tanh):
// x (B, T, C), already normed -> down(gelu_tanh(gate(x)) * up(x)).
at::Tensor geglu_mlp_block(const DecoderLayer& layer, const at::Tensor& x, const LayerContext& context);

}  // namespace finetune
