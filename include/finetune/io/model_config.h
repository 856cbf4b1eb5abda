// config.json -> ModelConfig for the decoder families of the architecture table
// (model/architecture.h: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM,
// Phi3ForCausalLM, Gemma, Qwen3MoeForCausalLM, MixtralForCausalLM),
// dispatched on architectures[0] (or model_type when no class is named).
// Reads both the transformers 4.x spelling (rope_theta, rope_scaling, torch_dtype) and the 5.x one
// (rope_parameters, dtype). Anything we would compute differently from transformers (an unknown
// architecture, rope type, activation, sliding window in use...) is an error, not a silent
// wrong model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace finetune {

struct RopeScaling {
  std::string rope_type = "default";  // default|linear|llama3|yarn|dynamic|longrope
  double factor = 1.0;
  double low_freq_factor = 1.0;       // llama3
  double high_freq_factor = 4.0;      // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, yarn, longrope
  // longrope (Phi-3): per-frequency divisors for rows up to original_max_position_embeddings
  // (short) and beyond (long), and the cos/sin scale (rope_attention_scaling in rope.h).
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  std::optional<double> attention_factor;  // longrope, yarn
  // yarn: the ramp's rotation bounds (transformers: a missing or 0 value means 32 and 1), the
  // attention factor's mscale terms, and whether the ramp's ends are rounded outwards.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  bool truncate = true;
};

// config.json's quantization_config of a checkpoint saved in 4-bit by transformers + bitsandbytes
// (quant_method "bitsandbytes", load_in_4bit): its decoder projections are stored as 4-bit
// weights (quant/nf4.h) and load as such.
struct Bnb4bitQuantization {
  std::string quant_type = "nf4";        // bnb_4bit_quant_type: nf4|fp4
  bool use_double_quant = false;         // bnb_4bit_use_double_quant
  std::string compute_dtype = "float32";  // bnb_4bit_compute_dtype
  std::vector<std::string> skip_modules;  // llm_int8_skip_modules: kept in 16-bit
};

// A mixture-of-experts decoder's routing (Qwen3MoeConfig, MixtralConfig): which layers are sparse,
// how many experts each token reaches and how their outputs are weighted, and the router's
// load-balancing loss (model/moe_block.h).
struct MoeConfig {
  int64_t num_experts = 0;            // Qwen3-MoE num_experts (saved as num_local_experts); Mixtral num_local_experts
  int64_t num_experts_per_tok = 0;    // top-k
  int64_t moe_intermediate_size = 0;  // each expert's width (Mixtral: intermediate_size)
  bool norm_topk_prob = false;        // renormalise the top-k probabilities to sum to 1 (Mixtral: always)
  // Qwen3-MoE casts the top-k weights to the router logits' dtype before weighting the experts;
  // Mixtral keeps them in fp32 (the product is promoted, then cast back).
  bool routing_weights_in_model_dtype = false;
  int64_t decoder_sparse_step = 1;     // layer i is sparse when (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;  // ... and i is not listed here (those run a dense MLP of intermediate_size)
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;  // add router_aux_loss_coef * load-balancing loss to the loss (train and eval)
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // llama|qwen2|qwen3|mistral
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;      // defaults to hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double partial_rotary_factor = 1.0;  // Phi-3 / Phi-4-mini: RoPE on the first int(head_dim * f) dims
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o for llama) bias; Qwen2 always has q/k/v bias
  bool attention_output_bias = false;  // o_proj bias (llama's attention_bias covers o too)
  bool mlp_bias = false;
  bool qk_norm = false;         // Qwen3 per-head RMSNorm on q and k
  int64_t max_position_embeddings = 0;
  std::string torch_dtype = "float32";  // dtype the checkpoint was saved in
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  // The sliding-window attention span: a query attends to the last `sliding_window` positions,
  // itself included, as transformers' sliding_window_overlay (Mistral's default 4096 when the key
  // is absent; Gemma's sliding layers). Always empty for Qwen2/Qwen3 (their use_sliding_window=true
  // is rejected here).
  std::optional<int64_t> sliding_window;
  // Per layer: whether it attends within sliding_window only (config.json layer_types,
  // "sliding_attention"). Empty: every layer does when sliding_window is set (Mistral).
  std::vector<bool> sliding_layers;
  // Gemma-2/3 (transformers' Gemma2Config / Gemma3TextConfig):
  std::string hidden_activation = "silu";  // silu (SwiGLU) | gelu_pytorch_tanh (GeGLU)
  std::optional<double> query_pre_attn_scalar;  // attention scale query_pre_attn_scalar^-0.5; empty: head_dim^-0.5
  std::optional<double> attn_logit_softcapping;   // scores -> c * tanh(scores / c) before the mask (Gemma-2)
  std::optional<double> final_logit_softcapping;  // logits -> c * tanh(logits / c)
  // Gemma-3: the RoPE base of sliding layers (rope_parameters.sliding_attention.rope_theta, v4's
  // rope_local_base_freq), with default (unscaled) RoPE; empty: every layer uses rope_theta/rope_scaling.
  std::optional<double> rope_local_base_freq;
  std::optional<MoeConfig> moe;     // Qwen3-MoE, Mixtral; empty for dense architectures
  std::optional<Bnb4bitQuantization> quantization;  // a pre-quantized 4-bit checkpoint
  nlohmann::json raw;           // the original config.json, re-written on merged export
};


// Whether layer `layer` attends within config.sliding_window only.
bool layer_is_sliding(const ModelConfig& config, int64_t layer);

// Whether layer `layer` routes its tokens to experts (a MoE config's sparse layers); false for dense models.
bool layer_is_sparse(const ModelConfig& config, int64_t layer);

// `source` names the file in error messages.
ModelConfig model_config_from_json(const nlohmann::json& json, const std::string& source);
ModelConfig load_model_config(const std::string& model_dir);  // reads MODEL_DIR/config.json

// Error naming `source` and the field when a size is beyond any real model's (Note [Config bounds]
// in model_config.cpp) or rope_theta is not a positive finite number; model_config_from_json
// calls it before anything is allocated from the config.
void validate_model_config_bounds(const ModelConfig& config, const std::string& source);

}  // namespace finetune
