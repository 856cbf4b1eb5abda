#include "finetune/gguf/gguf_quant_mix.h"

#include <cstdio>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

bool is_quantized(GgmlType type) { return ggml_block_size(type) > 1; }

int layer_of(const std::string& name) {
  int layer = -1;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  return layer;
}

// tensor_allows_quantization, for the tensor names our architectures have (the expert stacks are
// 3-D; the router, ffn_gate_inp, stays as the F16 file has it).
bool allows_quantization(const std::string& name, int64_t dims) {
  return dims >= 2 && ends_with(name, "weight") && name.find("_norm.weight") == std::string::npos &&
         name.find("ffn_gate_inp.weight") == std::string::npos;
}

// category_is_attn_v: attn_v, and Phi-3's fused attn_qkv, which holds the v rows.
bool is_attention_v(const std::string& name) {
  return name.find("attn_v.weight") != std::string::npos || name.find("attn_qkv.weight") != std::string::npos;
}

bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// llama_tensor_get_type_impl's branches for the mixes here (tensor_get_category's order: attn_v
// before attn_k before attn_output before ffn_down).
GgmlType mix_type(const GgufQuantMix& mix, GgufMixState& state, const std::string& name, int64_t row_length) {
  GgmlType type = mix.default_type;
  const bool k_m = mix.file_type == 15 || mix.file_type == 17;  // Q4_K_M, Q5_K_M
  const bool eight_experts = state.n_expert == 8;               // Mixtral-8x7B's shape
  if (name == "output.weight" || (state.has_tied_embeddings && name == "token_embd.weight")) {
    if (row_length % ggml_block_size(type) != 0) {
      type = GgmlType::kQ8_0;
    } else if (type != GgmlType::kQ8_0) {
      type = GgmlType::kQ6_K;
    }
  } else if (is_attention_v(name)) {
    if (k_m && use_more_bits(state.i_attention_wv, state.n_attention_wv)) type = GgmlType::kQ6_K;
    if (state.is_70b && type == GgmlType::kQ4_K) type = GgmlType::kQ5_K;
    if (eight_experts) type = GgmlType::kQ8_0;
    ++state.i_attention_wv;
  } else if (name.find("attn_k.weight") != std::string::npos) {
    if (eight_experts) type = GgmlType::kQ8_0;
  } else if (name.find("attn_output.weight") != std::string::npos) {
    if (eight_experts && mix.file_type == 15) type = GgmlType::kQ5_K;  // Q4_K_M
  } else if (name.find("ffn_down") != std::string::npos) {
    // With experts the layer is read from the name (layer_info), else counted.
    const int i_layer = state.n_expert > 1 ? layer_of(name) : state.i_ffn_down;
    if (k_m && use_more_bits(i_layer, state.n_layer)) type = GgmlType::kQ6_K;
    ++state.i_ffn_down;
  }
  return type;
}

// tensor_type_fallback (which throws for the 32-value blocks: it has no fallback for them).
GgmlType fallback(GgmlType type, int64_t row_length, const std::string& name) {
  if (row_length % ggml_block_size(type) == 0) return type;
  GgmlType out = type;
  switch (type) {
    case GgmlType::kQ4_K: out = GgmlType::kQ5_0; break;
    case GgmlType::kQ5_K: out = GgmlType::kQ5_1; break;
    case GgmlType::kQ6_K: out = GgmlType::kQ8_0; break;
    default:
      throw Error("GGUF: tensor '" + name + "' has rows of " + std::to_string(row_length) + " values, not a multiple of " +
                  std::to_string(ggml_block_size(type)) + ": llama.cpp's quantizer has no fallback for " +
                  ggml_type_name(type) + " (use f16 or q8_0)");
  }
  return row_length % ggml_block_size(out) == 0 ? out : GgmlType::kF16;
}

}  // namespace

std::optional<GgufQuantMix> gguf_quant_mix(const std::string& name) {
  if (name == "q4_0") return GgufQuantMix{"Q4_0", 2, GgmlType::kQ4_0};
  if (name == "q5_0") return GgufQuantMix{"Q5_0", 8, GgmlType::kQ5_0};
  if (name == "q4_k_m") return GgufQuantMix{"Q4_K_M", 15, GgmlType::kQ4_K};
  if (name == "q5_k_m") return GgufQuantMix{"Q5_K_M", 17, GgmlType::kQ5_K};
  if (name == "q6_k") return GgufQuantMix{"Q6_K", 18, GgmlType::kQ6_K};
  return std::nullopt;
}

bool gguf_quantizer_order(const std::string& a, const std::string& b) {
  const int layer_a = layer_of(a), layer_b = layer_of(b);
  if (layer_a != layer_b) return layer_a < layer_b;
  return a < b;
}

bool gguf_is_70b(const std::string& architecture, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                 int64_t n_expert) {
  if (n_layer != 80) return false;
  return architecture == "qwen2" || (architecture == "llama" && n_expert != 8 && n_head != n_head_kv);
}

GgufMixState gguf_mix_state(const std::vector<std::string>& gguf_names, int n_layer, int n_expert, bool is_70b) {
  GgufMixState state;
  state.n_layer = n_layer;
  state.n_expert = n_expert;
  state.is_70b = is_70b;
  for (const auto& name : gguf_names) {
    if (is_attention_v(name)) ++state.n_attention_wv;
    if (name == "output.weight") state.has_tied_embeddings = false;
  }
  return state;
}

GgmlType gguf_mix_tensor_type(const GgufQuantMix& mix, GgufMixState& state, const std::string& name,
                              int64_t row_length, int64_t dims, GgmlType source_type) {
  if (!allows_quantization(name, dims)) return source_type;
  if (!is_quantized(mix.default_type)) return mix.default_type;
  return fallback(mix_type(mix, state, name, row_length), row_length, name);
}

}  // namespace finetune
