// The decoder-only causal LM of every architecture in the name table (architecture.h: Llama,
// Qwen2, Qwen3, Mistral, Gemma-2, Gemma-3), in LibTorch, with parameter names identical to transformers'
// (model.layers.3.self_attn.q_proj.weight, ...), all read from that table.
//
//   input_ids (B, T) -> embed_tokens (-> the composition's embedding scale) (-> NEFTune's noise when
//   training) -> N x layer -> norm
//     -> hidden (B, T, C)
// Each layer is the architecture's composition of the shared blocks (decoder_composition.h,
// decoder_blocks.h). The LM head is applied separately (output_head(), see train/loss.h) so the
// trainer never materialises full fp32 logits.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/model/activation_offload.h"
#include "finetune/model/architecture.h"
#include "finetune/model/attention_kernels.h"
#include "finetune/model/attention_mask.h"
#include "finetune/model/decoder_blocks.h"
#include "finetune/model/decoder_composition.h"
#include "finetune/model/embedding_noise.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/model/kv_cache.h"
#include "finetune/model/linear.h"
#include "finetune/model/moe_block.h"
#include "finetune/model/rope.h"

namespace finetune {

// What turns final hidden states into logits: logits = hidden weight^T, then, when set,
// softcap * tanh(logits / softcap). The loss, evaluation and generation read this, not the raw weight.
struct OutputHead {
  at::Tensor weight;  // (V, C): lm_head, or embed_tokens when tied
  std::optional<double> final_logit_softcapping;
};

struct ForwardOptions {
  bool training = false;
  bool gradient_checkpointing = false;
  // A mixture-of-experts model's sparse layers append their router logits (B*T, E) here, in layer
  // order (the load-balancing loss reads them, moe_block.h). Not with gradient_checkpointing: the
  // recompute would run the routers again in backward.
  std::vector<at::Tensor>* router_logits = nullptr;
  // The MLPs' per-tile intermediate budget (Note [Sequence-tiled MLP] in model/sequence_tiling.cpp).
  int64_t mlp_tile_bytes = kMlpTileBytes;
  // With gradient checkpointing, the layers' inputs wait for backward in host memory (Note
  // [Activation offloading]) when all of them together take more bytes than this (0: always);
  // nullopt: never. offload_above_bytes() (activation_offload.h) turns --offload_activations into it.
  std::optional<int64_t> offload_activations_above_bytes;
  // Where offloaded inputs go: null, a pinned host tensor each; else this arena, capturable in a
  // CUDA graph (Note [Offload arena]; the graphed micro-steps share one).
  std::shared_ptr<const OffloadArena> offload_arena;
  // NEFTune: noise added to the input embeddings when training (model/embedding_noise.h); nullopt:
  // none. The trainer sets it per micro-batch (its padded length and seed).
  std::optional<EmbeddingNoise> embedding_noise;
};

class CausalLM {
 public:
  // Allocates uninitialised parameters of `dtype` on `device`; load weights next
  // (weights/model_weights.h). The kernels are chosen here, once (kernel_policy.h). With
  // `projections_4bit` the decoder projections get no dense weight: the loader gives each a 4-bit
  // one (Note [4-bit base weights] in linear.h); embeddings, norms and lm_head stay in `dtype`.
  // `long_row_attention`: the kernel asked for long rows' attention (KernelPolicy::long_row_attention).
  CausalLM(ModelConfig config, at::ScalarType dtype, at::Device device, bool projections_4bit = false,
           const KernelRequests& kernel_requests = {});

  const ModelConfig& config() const { return config_; }
  const Architecture& architecture() const { return *architecture_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  const KernelPolicy& kernel_policy() const { return kernels_; }
  bool projections_4bit() const { return projections_4bit_; }

  // Every dense base parameter with its HF name (4-bit projection weights are reached through
  // named_linears); lm_head.weight is listed only when untied.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  // Every projection that can take an adapter, named like HF (model.layers.0.self_attn.q_proj).
  std::vector<std::pair<std::string, Linear*>> named_linears();
  std::vector<std::pair<std::string, const Linear*>> named_linears() const;
  // A mixture-of-experts model's expert stacks, named like HF (model.layers.0.mlp.experts.gate_up_proj),
  // in layer order, gate_up_proj before down_proj; empty for dense models.
  std::vector<std::pair<std::string, ExpertStack*>> named_expert_stacks();
  std::vector<std::pair<std::string, const ExpertStack*>> named_expert_stacks() const;

  // input_ids, position_ids: (B, T) int64 -> final hidden states (B, T, C) in the model dtype.
  at::Tensor forward_hidden(const at::Tensor& input_ids, const at::Tensor& position_ids,
                            const AttentionMask& mask, const ForwardOptions& options) const;

  // Note [KV-cache forward]
  // Incremental decoding: input_ids, position_ids (B, T) -> final hidden states (B, T, C). The
  // keys/values of these T positions are written at cache.length (then advanced by T), and the
  // queries attend to every cached position up to their own. key_mask (B, cache.length + T) bool,
  // false at (left) padding, or undefined when no row has any. Both forwards run the same
  // composition and blocks; only the attention kernel differs, so a cached forward computes what
  // forward_hidden does.
  at::Tensor forward_cached(const at::Tensor& input_ids, const at::Tensor& position_ids, KVCache& cache,
                            const at::Tensor& key_mask) const;

  // hidden (..., C) -> logits (..., V) in the model dtype, through output_head().
  at::Tensor lm_head(const at::Tensor& hidden) const;
  OutputHead output_head() const;
  // output_head().weight; kept until the loss reads output_head().
  const at::Tensor& lm_head_weight() const;

  // Whether any adapter draws random numbers in its forward (LoRA dropout).
  bool adapters_draw_random_numbers() const;
  // Whether training micro-steps may be replayed from CUDA graphs (train/micro_step_graphs.h):
  // adapters that say so (plain LoRA without dropout), on 16-bit or 4-bit projections (each use
  // dequantizes into a fresh tensor). DoRA has not been verified under capture on a GPU and runs
  // eagerly; soft-capped attention
  // (Gemma-2) reads the samples' lengths on the host; mixture-of-experts layers need their expert
  // GEMMs grouped on the device and 16-bit expert stacks (moe_layer_graph_safe, Note [Graphed
  // expert routing]).
  bool cuda_graph_safe() const;

  // Base parameters, a 4-bit weight counted by its elements.
  int64_t parameter_count() const;

 private:
  // input_ids (B, T) -> the first layer's input (B, T, C).
  at::Tensor embed(const at::Tensor& input_ids) const;
  // The attention kernel of forward_hidden for `mask` over rows of `seq_len` and a layer's `spec`
  // (attention_kernels.h).
  AttentionKernel attention_kernel(const AttentionMask& mask, const AttentionSpec& spec, int64_t seq_len) const;
  // forward_cached's kernel for one layer: writes k, v into its cache tensors at `past`.
  AttentionKernel cached_attention_kernel(at::Tensor& keys, at::Tensor& values, int64_t past,
                                          const at::Tensor& mask, const AttentionSpec& spec) const;
  // The final RMSNorm (Gemma's (1 + w) form where the table says so): (..., C) -> (..., C).
  at::Tensor final_norm(const at::Tensor& hidden) const;
  // An offloader for this forward's checkpointed inputs when options ask for one at this size
  // (embedded: the (B, T, C) embeddings, whose size every layer's input has), else null.
  std::shared_ptr<ActivationOffloader> activation_offloader(const at::Tensor& embedded,
                                                            const ForwardOptions& options) const;
  at::Tensor layer_forward(const DecoderLayer& layer, const at::Tensor& hidden, const RopeTables& rope,
                           const AttentionKernel& kernel, bool training,
                           std::vector<at::Tensor>* router_logits = nullptr,
                           int64_t mlp_tile_bytes = kMlpTileBytes,
                           const std::function<void()>& after_mlp_backward = {}) const;

  ModelConfig config_;
  const Architecture* architecture_;
  const DecoderComposition* composition_;
  LayerLayout layout_;
  at::ScalarType dtype_;
  at::Device device_;
  bool projections_4bit_;
  KernelPolicy kernels_;
  at::Tensor embed_tokens_;  // (V, C)
  std::vector<DecoderLayer> layers_;
  at::Tensor norm_;          // (C)
  at::Tensor lm_head_;       // (V, C); undefined when tied (embed_tokens_ is used)
  RopeFrequencies rope_;        // inv_freq (rotary_dim / 2) fp32; longrope's long table
  RopeFrequencies local_rope_;  // sliding layers' (Gemma-3's rope_local_base_freq); inv_freq undefined when shared
};

}  // namespace finetune
