// The supported decoder architectures, one table entry each: the names config.json gives them
// (architectures[0], model_type), transformers' defaults for the keys config.json leaves out, and
// every tensor of a decoder layer as the checkpoint names it, with what the tensor does (its
// role) and what llama.cpp calls it. The one name table read by config.json dispatch
// (io/model_config.h), the model's layout and its per-architecture composition
// (decoder_composition.h), weight loading, LoRA target matching, PEFT adapter names, merged
// export, GGUF tensor names and the option parser's --target_modules.
// Header-only and LibTorch-free, so the option parser (finetune_base) reads it too.
//
// Note [Fused projections]
// A module whose rows hold several logical projections (Phi-3's self_attn.qkv_proj: q, k and v;
// mlp.gate_up_proj: gate and up) is one LayerModule listing its roles in row order. The model
// runs it once and splits its output by layer_module_split_sizes; LoRA targets, PEFT names,
// loading and export see one module with one weight, as PEFT and the checkpoint do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "finetune/io/model_config.h"
#include "finetune/util/errors.h"

namespace finetune {

enum class ArchitectureId { kLlama, kQwen2, kQwen3, kMistral, kPhi3, kGemma2, kGemma3, kQwen3Moe, kMixtral };

// What a module of a decoder layer does, whatever its architecture calls it.
enum class ModuleRole {
  kAttentionInputNorm,  // RMSNorm before attention (HF: input_layernorm)
  kMlpInputNorm,        // RMSNorm before the MLP (Llama: post_attention_layernorm)
  kAttentionOutputNorm,  // RMSNorm of the attention output, before its residual (Gemma: post_attention_layernorm)
  kMlpOutputNorm,        // RMSNorm of the MLP output, before its residual (Gemma: post_feedforward_layernorm)
  kQueryNorm,           // per-head RMSNorm on q (Qwen3)
  kKeyNorm,             // per-head RMSNorm on k (Qwen3)
  kQuery,
  kKey,
  kValue,
  kAttentionOutput,
  kGate,
  kUp,
  kDown,
};
constexpr int kModuleRoleCount = static_cast<int>(ModuleRole::kDown) + 1;

inline bool is_norm_role(ModuleRole role) {
  return role == ModuleRole::kAttentionInputNorm || role == ModuleRole::kMlpInputNorm ||
         role == ModuleRole::kAttentionOutputNorm || role == ModuleRole::kMlpOutputNorm ||
         role == ModuleRole::kQueryNorm || role == ModuleRole::kKeyNorm;
}

// One module of a decoder layer: a norm (one role) or a projection (one role, or several when
// fused: Note [Fused projections]).
struct LayerModule {
  std::string path;               // under model.layers.N: "self_attn.q_proj", "input_layernorm"
  std::vector<ModuleRole> roles;  // {kQuery}; a fused qkv_proj: {kQuery, kKey, kValue}
  std::string gguf_name;          // llama.cpp's block tensor: "attn_q"

  bool is_projection() const { return !is_norm_role(roles.front()); }
  // "q_proj": the name --target_modules and PEFT's target_modules match.
  std::string leaf_name() const { return path.substr(path.rfind('.') + 1); }
};

// transformers' defaults for keys config.json may leave out (its config class's __init__).
struct ConfigDefaults {
  int64_t num_key_value_heads;  // 0: = num_attention_heads
  int64_t head_dim;             // 0: = hidden_size / num_attention_heads
  int64_t max_position_embeddings;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  double rope_theta = 10000.0;  // when config.json gives none (Mixtral's default_theta: 1e6)
  double rms_norm_eps = 1e-6;   // Mixtral: 1e-5
};

// Note [Expert tensors]
// A sparse (mixture-of-experts) layer of transformers 5.17 holds a router (mlp.gate.weight, (E, C))
// and its experts as two 3-D parameters, mlp.experts.gate_up_proj (E, 2I, C: gate rows, then up
// rows) and mlp.experts.down_proj (E, C, I); those are the model's names, which PEFT's
// target_parameters and adapter names follow. The checkpoint keeps one tensor per expert and
// projection (Qwen3-MoE: mlp.experts.E.gate_proj.weight; Mixtral: block_sparse_moe.experts.E.w1
// for gate, w3 for up, w2 for down, and block_sparse_moe.gate.weight), which transformers' loader
// stacks and save_pretrained splits again: so do weight loading and merged export here
// (model/moe_block.h names both spellings).
struct MoeLayout {
  std::string router = "mlp.gate";      // the router's module; its weight is <router>.weight
  std::string experts = "mlp.experts";  // the module holding gate_up_proj and down_proj
  std::string checkpoint_block;         // the checkpoint's module for both: "mlp" | "block_sparse_moe"
  std::string checkpoint_gate, checkpoint_up, checkpoint_down;  // per-expert leaf names
  // Qwen3-MoE's dense layers (mlp_only_layers, decoder_sparse_step): a SwiGLU MLP of intermediate_size.
  std::vector<LayerModule> dense_mlp_modules;
};

struct Architecture {
  ArchitectureId id;
  std::vector<std::string> class_names;  // config.json "architectures" (the first is written by save_pretrained)
  std::string model_type;                // config.json "model_type"
  ConfigDefaults defaults;
  // The modules of every decoder layer, in the order HF lists their parameters (weights load and
  // export in this order; LoRA adapters are initialised in it).
  std::vector<LayerModule> layer_modules;
  std::string gguf_architecture;  // llama.cpp's general.architecture; empty: no GGUF export
  bool gguf_permutes_qk;          // llama.cpp's "llama" rope rotates interleaved pairs: q/k rows permuted
  // Tensors outside the layers (a multimodal checkpoint's text tower may nest them deeper).
  std::string layer_prefix = "model.layers.";
  std::string embed_tokens = "model.embed_tokens.weight";
  std::string final_norm = "model.norm.weight";
  std::string lm_head = "lm_head.weight";
  // Gemma's RMSNorm scales by (1 + weight), in fp32 (Gemma2RMSNorm): the checkpoint stores w.
  bool rms_norm_unit_offset = false;
  // Where a checkpoint may store the tensors under another prefix than the model's module names
  // (Gemma-3's multimodal checkpoints: "language_model.model." for "model.language_model."), and
  // prefixes of checkpoint tensors that are not part of the text model (its vision tower).
  std::vector<std::pair<std::string, std::string>> checkpoint_prefix_aliases = {};
  std::vector<std::string> ignored_checkpoint_prefixes = {};
  // Mixture-of-experts architectures: the sparse block's tensors (Note [Expert tensors]).
  std::optional<MoeLayout> moe = std::nullopt;
};

// The projections Llama, Qwen2/3, Mistral and Gemma share, in HF's parameter order: q, k, v, o,
// the q/k norms where the architecture has them, then gate, up, down.
inline std::vector<LayerModule> attention_and_mlp_projections(bool qk_norm) {
  using R = ModuleRole;
  std::vector<LayerModule> modules = {
      {"self_attn.q_proj", {R::kQuery}, "attn_q"},
      {"self_attn.k_proj", {R::kKey}, "attn_k"},
      {"self_attn.v_proj", {R::kValue}, "attn_v"},
      {"self_attn.o_proj", {R::kAttentionOutput}, "attn_output"},
  };
  if (qk_norm) {
    modules.push_back({"self_attn.q_norm", {R::kQueryNorm}, "attn_q_norm"});
    modules.push_back({"self_attn.k_norm", {R::kKeyNorm}, "attn_k_norm"});
  }
  modules.push_back({"mlp.gate_proj", {R::kGate}, "ffn_gate"});
  modules.push_back({"mlp.up_proj", {R::kUp}, "ffn_up"});
  modules.push_back({"mlp.down_proj", {R::kDown}, "ffn_down"});
  return modules;
}

// Llama's layer, which Qwen2, Qwen3 and Mistral share (Qwen3 adds q/k norms): the input norm, the
// projections, the post-attention norm.
inline std::vector<LayerModule> llama_layer_modules(bool qk_norm) {
  using R = ModuleRole;
  std::vector<LayerModule> modules = {{"input_layernorm", {R::kAttentionInputNorm}, "attn_norm"}};
  for (auto& module : attention_and_mlp_projections(qk_norm)) modules.push_back(std::move(module));
  modules.push_back({"post_attention_layernorm", {R::kMlpInputNorm}, "ffn_norm"});
  return modules;
}

// Phi-3's layer (Phi-3, Phi-3.5, Phi-4, Phi-4-mini): fused qkv_proj (q, k, v rows) and gate_up_proj
// (gate rows, then up rows: Phi3MLP's chunk(2)), listed in Phi3DecoderLayer's parameter order.
inline std::vector<LayerModule> phi3_layer_modules() {
  using R = ModuleRole;
  return {
      {"input_layernorm", {R::kAttentionInputNorm}, "attn_norm"},
      {"self_attn.o_proj", {R::kAttentionOutput}, "attn_output"},
      {"self_attn.qkv_proj", {R::kQuery, R::kKey, R::kValue}, "attn_qkv"},
      {"mlp.gate_up_proj", {R::kGate, R::kUp}, "ffn_up"},
      {"mlp.down_proj", {R::kDown}, "ffn_down"},
      {"post_attention_layernorm", {R::kMlpInputNorm}, "ffn_norm"},
  };
}

// Gemma-2's and Gemma-3's layer: Llama's projections (Gemma-3 adds q/k norms) and four norms,
// around attention and around the MLP, in HF's parameter order.
inline std::vector<LayerModule> gemma_layer_modules(bool qk_norm) {
  using R = ModuleRole;
  std::vector<LayerModule> modules = attention_and_mlp_projections(qk_norm);
  modules.push_back({"input_layernorm", {R::kAttentionInputNorm}, "attn_norm"});
  modules.push_back({"post_attention_layernorm", {R::kAttentionOutputNorm}, "post_attention_norm"});
  modules.push_back({"pre_feedforward_layernorm", {R::kMlpInputNorm}, "ffn_norm"});
  modules.push_back({"post_feedforward_layernorm", {R::kMlpOutputNorm}, "post_ffw_norm"});
  return modules;
}

// A Gemma entry (GGUF: llama.cpp's gemma2 / gemma3, whose norms are stored as 1 + w).
inline Architecture gemma_architecture(ArchitectureId id, std::vector<std::string> class_names, std::string model_type,
                                       int64_t max_position_embeddings, bool qk_norm) {
  Architecture architecture{id, std::move(class_names), std::move(model_type), {4, 256, max_position_embeddings, 2, 1},
                            gemma_layer_modules(qk_norm), id == ArchitectureId::kGemma2 ? "gemma2" : "gemma3", false};
  architecture.rms_norm_unit_offset = true;
  return architecture;
}

// Gemma3ForConditionalGeneration: its text tower, under model.language_model (transformers'
// module names, which PEFT's adapter names follow); save_pretrained writes the tensors under
// language_model.model. and its vision tower beside them.
inline Architecture gemma3_multimodal_architecture() {
  auto architecture = gemma_architecture(ArchitectureId::kGemma3, {"Gemma3ForConditionalGeneration"}, "gemma3",
                                         131072, true);
  architecture.layer_prefix = "model.language_model.layers.";
  architecture.embed_tokens = "model.language_model.embed_tokens.weight";
  architecture.final_norm = "model.language_model.norm.weight";
  architecture.checkpoint_prefix_aliases = {{"model.language_model.", "language_model.model."},
                                            {"lm_head.", "language_model.lm_head."}};
  architecture.ignored_checkpoint_prefixes = {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                                              "model.multi_modal_projector."};
  return architecture;
}

// A MoE layer's modules besides its MLP (model/moe_block.h owns that): Llama's attention (with
// Qwen3's q/k norms when asked) and its two norms, in HF's parameter order.
inline std::vector<LayerModule> moe_layer_modules(bool qk_norm) {
  using R = ModuleRole;
  std::vector<LayerModule> modules;
  for (auto& module : llama_layer_modules(qk_norm)) {
    const auto role = module.roles.front();
    if (role != R::kGate && role != R::kUp && role != R::kDown) modules.push_back(std::move(module));
  }
  return modules;
}

// Qwen3MoeForCausalLM: Qwen3's attention, sparse layers of num_experts experts (transformers'
// Qwen3MoeConfig defaults), dense layers where mlp_only_layers / decoder_sparse_step say.
inline Architecture qwen3_moe_architecture() {
  Architecture architecture{ArchitectureId::kQwen3Moe, {"Qwen3MoeForCausalLM"}, "qwen3_moe",
                            {4, 0, 32768, std::nullopt, std::nullopt}, moe_layer_modules(true), "qwen3moe", false};
  MoeLayout moe;
  moe.checkpoint_block = "mlp";
  moe.checkpoint_gate = "gate_proj";
  moe.checkpoint_up = "up_proj";
  moe.checkpoint_down = "down_proj";
  for (const auto& module : llama_layer_modules(false)) {
    const auto role = module.roles.front();
    if (role == ModuleRole::kGate || role == ModuleRole::kUp || role == ModuleRole::kDown)
      moe.dense_mlp_modules.push_back(module);
  }
  architecture.moe = moe;
  return architecture;
}

// MixtralForCausalLM: Mistral's attention, every layer sparse (experts of intermediate_size).
// llama.cpp's converter writes it as "llama" with expert tensors (q/k rows permuted as Llama's).
inline Architecture mixtral_architecture() {
  Architecture architecture{ArchitectureId::kMixtral, {"MixtralForCausalLM"}, "mixtral",
                            {8, 0, 131072, 1, 2, 1000000.0, 1e-5}, moe_layer_modules(false), "llama", true};
  MoeLayout moe;
  moe.checkpoint_block = "block_sparse_moe";
  moe.checkpoint_gate = "w1";
  moe.checkpoint_up = "w3";
  moe.checkpoint_down = "w2";
  architecture.moe = moe;
  return architecture;
}

inline const std::vector<Architecture>& architectures() {
  using A = ArchitectureId;
  static const std::vector<Architecture> table = {
      {A::kLlama, {"LlamaForCausalLM"}, "llama", {0, 0, 2048, 1, 2}, llama_layer_modules(false), "llama", true},
      {A::kQwen2, {"Qwen2ForCausalLM"}, "qwen2", {32, 0, 32768, std::nullopt, std::nullopt},
       llama_layer_modules(false), "qwen2", false},
      {A::kQwen3, {"Qwen3ForCausalLM"}, "qwen3", {32, 128, 32768, std::nullopt, std::nullopt},
       llama_layer_modules(true), "qwen3", false},
      {A::kMistral, {"MistralForCausalLM"}, "mistral", {8, 0, 131072, 1, 2}, llama_layer_modules(false), "llama", true},
      {A::kPhi3, {"Phi3ForCausalLM"}, "phi3", {0, 0, 4096, 1, 32000}, phi3_layer_modules(), "phi3", false},
      gemma_architecture(A::kGemma2, {"Gemma2ForCausalLM"}, "gemma2", 8192, false),
      gemma_architecture(A::kGemma3, {"Gemma3ForCausalLM"}, "gemma3_text", 131072, true),
      gemma3_multimodal_architecture(),
      qwen3_moe_architecture(),
      mixtral_architecture(),
  };
  return table;
}

inline std::string supported_architecture_names() {
  std::string out;
  for (const auto& architecture : architectures())
    for (const auto& name : architecture.class_names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// By config.json's class name ("LlamaForCausalLM") or model_type ("llama"); null when unknown.
inline const Architecture* find_architecture_by_class(const std::string& class_name) {
  for (const auto& architecture : architectures())
    for (const auto& name : architecture.class_names)
      if (name == class_name) return &architecture;
  return nullptr;
}
inline const Architecture* find_architecture_by_model_type(const std::string& model_type) {
  for (const auto& architecture : architectures())
    if (architecture.model_type == model_type) return &architecture;
  return nullptr;
}

// The entry of a parsed config (its `architecture` class name); Error naming the class otherwise.
inline const Architecture& architecture_of(const ModelConfig& config) {
  const Architecture* architecture = find_architecture_by_class(config.architecture);
  if (!architecture) {
    throw Error("unsupported architecture \"" + config.architecture + "\"; supported: " +
                supported_architecture_names());
  }
  return *architecture;
}

inline bool has_role(const Architecture& architecture, ModuleRole role) {
  for (const auto& module : architecture.layer_modules)
    for (ModuleRole r : module.roles)
      if (r == role) return true;
  return false;
}

// The leaf names of the architecture's projections (valid --target_modules), in layer order.
inline std::vector<std::string> lora_target_names(const Architecture& architecture) {
  std::vector<std::string> names;
  for (const auto& module : architecture.layer_modules)
    if (module.is_projection()) names.push_back(module.leaf_name());
  if (architecture.moe)
    for (const auto& module : architecture.moe->dense_mlp_modules) names.push_back(module.leaf_name());
  return names;
}

// Every architecture's projection leaf names, each once, first-seen order: what the option parser
// accepts before it knows the model (attach_lora then checks them against the model's own).
inline std::vector<std::string> all_lora_target_names() {
  std::vector<std::string> names;
  for (const auto& architecture : architectures()) {
    for (const auto& name : lora_target_names(architecture)) {
      bool seen = false;
      for (const auto& known : names) seen = seen || known == name;
      if (!seen) names.push_back(name);
    }
  }
  return names;
}

// The size a role contributes to a module's output rows (a norm: its weight's length).
inline int64_t role_out_features(ModuleRole role, const ModelConfig& config) {
  switch (role) {
    case ModuleRole::kAttentionInputNorm:
    case ModuleRole::kMlpInputNorm:
    case ModuleRole::kAttentionOutputNorm:
    case ModuleRole::kMlpOutputNorm:
    case ModuleRole::kAttentionOutput:
    case ModuleRole::kDown: return config.hidden_size;
    case ModuleRole::kQueryNorm:
    case ModuleRole::kKeyNorm: return config.head_dim;
    case ModuleRole::kQuery: return config.num_attention_heads * config.head_dim;
    case ModuleRole::kKey:
    case ModuleRole::kValue: return config.num_key_value_heads * config.head_dim;
    case ModuleRole::kGate:
    case ModuleRole::kUp: return config.intermediate_size;
  }
  throw Error("role_out_features: unknown module role");
}

// A projection role's input width.
inline int64_t role_in_features(ModuleRole role, const ModelConfig& config) {
  if (role == ModuleRole::kAttentionOutput) return config.num_attention_heads * config.head_dim;
  if (role == ModuleRole::kDown) return config.intermediate_size;
  return config.hidden_size;
}

// The module's output split, one size per role in row order (Note [Fused projections]).
inline std::vector<int64_t> layer_module_split_sizes(const LayerModule& module, const ModelConfig& config) {
  std::vector<int64_t> sizes;
  for (ModuleRole role : module.roles) sizes.push_back(role_out_features(role, config));
  return sizes;
}

// The module's weight shape: (out, in) for a projection, (size) for a norm. Error when the roles
// of a fused module read inputs of different widths.
inline std::vector<int64_t> layer_module_weight_shape(const LayerModule& module, const ModelConfig& config) {
  int64_t out = 0;
  for (int64_t size : layer_module_split_sizes(module, config)) out += size;
  if (!module.is_projection()) return {out};
  const int64_t in = role_in_features(module.roles.front(), config);
  for (ModuleRole role : module.roles) {
    if (role_in_features(role, config) != in || is_norm_role(role))
      throw Error(module.path + ": a fused module's roles must be projections of one input");
  }
  return {out, in};
}

}  // namespace finetune
