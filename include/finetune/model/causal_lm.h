// The decoder-only causal LM shared by Llama, Qwen2, Qwen3 and Mistral, in LibTorch, with
// parameter names identical to transformers' (model.layers.3.self_attn.q_proj.weight, ...).
//
//   input_ids (B, T) -> embed_tokens -> N x DecoderLayer -> norm -> hidden (B, T, C)
//   DecoderLayer: h = h + o_proj(attn(input_layernorm(h)));  h = h + down(silu(gate(x)) * up(x)),
//                 x = post_attention_layernorm(h)
// The LM head is applied separately (see train/loss.h) so the trainer never materialises full
// fp32 logits.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/config/model_config.h"
#include "finetune/model/attention_mask.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/model/kv_cache.h"
#include "finetune/model/linear.h"
#include "finetune/model/rope.h"

namespace finetune {

struct DecoderLayer {
  at::Tensor input_layernorm;           // (C)
  at::Tensor post_attention_layernorm;  // (C)
  Linear q_proj, k_proj, v_proj, o_proj;
  at::Tensor q_norm, k_norm;            // (head_dim), Qwen3 only
  Linear gate_proj, up_proj, down_proj;
};

struct ForwardOptions {
  bool training = false;
  bool gradient_checkpointing = false;
};

class CausalLM {
 public:
  // Allocates uninitialised parameters of `dtype` on `device`; load weights next
  // (checkpoint/model_weights.h). The kernels are chosen here, once (kernel_policy.h). With
  // `projections_4bit` the decoder projections get no dense weight: the loader gives each a 4-bit
  // one (Note [4-bit base weights] in linear.h); embeddings, norms and lm_head stay in `dtype`.
  CausalLM(ModelConfig config, at::ScalarType dtype, at::Device device, bool projections_4bit = false);

  const ModelConfig& config() const { return config_; }
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

  // input_ids, position_ids: (B, T) int64 -> final hidden states (B, T, C) in the model dtype.
  at::Tensor forward_hidden(const at::Tensor& input_ids, const at::Tensor& position_ids,
                            const AttentionMask& mask, const ForwardOptions& options) const;

  // Note [KV-cache forward]
  // Incremental decoding: input_ids, position_ids (B, T) -> final hidden states (B, T, C). The
  // keys/values of these T positions are written at cache.length (then advanced by T), and the
  // queries attend to every cached position up to their own. key_mask (B, cache.length + T) bool,
  // false at (left) padding, or undefined when no row has any. The projections, norms, RoPE and
  // MLP are layer_forward's own helpers, so a cached forward computes what forward_hidden does.
  at::Tensor forward_cached(const at::Tensor& input_ids, const at::Tensor& position_ids, KVCache& cache,
                            const at::Tensor& key_mask) const;

  // hidden (..., C) -> logits (..., V) in the model dtype.
  at::Tensor lm_head(const at::Tensor& hidden) const;
  const at::Tensor& lm_head_weight() const;

  // Whether any adapter draws random numbers in its forward (LoRA dropout).
  bool adapters_draw_random_numbers() const;
  // Whether training micro-steps may be replayed from CUDA graphs (train/micro_step_graphs.h):
  // dense base weights and adapters that say so (plain LoRA without dropout). 4-bit weights and
  // DoRA have not been verified under capture on a GPU and run eagerly.
  bool cuda_graph_safe() const;

  // Base parameters, a 4-bit weight counted by its elements.
  int64_t parameter_count() const;

 private:
  at::Tensor layer_forward(const DecoderLayer& layer, const at::Tensor& hidden, const at::Tensor& cos,
                           const at::Tensor& sin, const AttentionMask& mask, bool training) const;
  at::Tensor layer_forward_cached(const DecoderLayer& layer, const at::Tensor& hidden, const RopeTables& rope,
                                  at::Tensor& keys, at::Tensor& values, int64_t past,
                                  const at::Tensor& attend) const;

  // The two halves around attention, shared by both forwards.
  struct AttentionInputs {
    at::Tensor q;  // (B, T, H, D) after q_norm and RoPE
    at::Tensor k;  // (B, T, KV, D)
    at::Tensor v;  // (B, T, KV, D)
  };
  // x: input_layernorm(hidden) (B, T, C).
  AttentionInputs attention_inputs(const DecoderLayer& layer, const at::Tensor& x, const RopeTables& rope,
                                   bool training) const;
  // hidden + o_proj(attn), then the MLP block; attn (B, T, H*D) -> (B, T, C).
  at::Tensor attention_output_and_mlp(const DecoderLayer& layer, const at::Tensor& hidden, const at::Tensor& attn,
                                      bool training) const;

  ModelConfig config_;
  at::ScalarType dtype_;
  at::Device device_;
  bool projections_4bit_;
  KernelPolicy kernels_;
  at::Tensor embed_tokens_;  // (V, C)
  std::vector<DecoderLayer> layers_;
  at::Tensor norm_;          // (C)
  at::Tensor lm_head_;       // (V, C); undefined when tied (embed_tokens_ is used)
  at::Tensor inv_freq_;      // (head_dim / 2) fp32
};

}  // namespace finetune
