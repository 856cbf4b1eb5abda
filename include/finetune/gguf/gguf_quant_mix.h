// llama.cpp's quantization mixes (llama_model_quantize without an importance matrix) applied to the
// F16 file the converter writes: --quantization q4_0, q5_0, q6_k, q4_k_m, q5_k_m. What
// llama-quant.cpp does, for the tensors our architectures have:
//  - which tensors are quantized (tensor_allows_quantization): 2-D and 3-D (expert) tensors named
//    *weight except norms and ffn_gate_inp; the rest (1-D, norms, rope_freqs) keep the F16 file's type (F32);
//  - the type of each (llama_tensor_get_type_impl): the mix's default (Q4_0, Q5_0, Q6_K, Q4_K,
//    Q5_K); output.weight (token_embd.weight when the embeddings are tied) Q6_K, or Q8_0 when its
//    rows are not a multiple of the default type's block; for Q4_K_M / Q5_K_M, attn_v (and Phi-3's
//    fused attn_qkv, counted with them: category_is_attn_v) and ffn_down of the layers
//    use_more_bits picks get Q6_K (and on a model llama.cpp types LLM_TYPE_70B - 80 layers, for
//    Llama with grouped-query attention - the remaining Q4_K attn_v get Q5_K);
//  - with 8 experts (n_expert == 8: Mixtral-8x7B's count) attn_v and attn_k get Q8_0 in every mix
//    here, and attn_output Q5_K in Q4_K_M; a MoE model's ffn_down_exps count as its ffn_down (the
//    layer read from the name); ffn_gate_inp (the router) is never quantized;
//  - tensor_type_fallback for rows that are not a multiple of the block (Q4_K -> Q5_0,
//    Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 when even 32 does not divide them; a Q4_0, Q5_0 or
//    Q8_0 choice for such rows is an Error, as llama.cpp's quantizer refuses it);
//  - the order: weight_name_comparer (non-layer tensors by name, then layer by layer, by name).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "finetune/gguf/gguf_quantize.h"

namespace finetune {

struct GgufQuantMix {
  std::string label;        // file name part as llama-quantize spells it: "Q4_K_M"
  uint32_t file_type;       // llama_ftype: Q4_0 2, Q5_0 8, Q4_K_M 15, Q5_K_M 17, Q6_K 18
  GgmlType default_type;    // llama_ftype_get_default_type
};

// "q4_0" | "q5_0" | "q6_k" | "q4_k_m" | "q5_k_m" -> the mix; nullopt for any other name.
std::optional<GgufQuantMix> gguf_quant_mix(const std::string& name);

// weight_name_comparer: whether GGUF tensor `a` comes before `b` in llama-quantize's output.
bool gguf_quantizer_order(const std::string& a, const std::string& b);

// The state llama_tensor_get_type carries from tensor to tensor, for one model.
struct GgufMixState {
  bool has_tied_embeddings = true;  // no output.weight
  int n_attention_wv = 0;
  int i_attention_wv = 0;
  int n_layer = 0;  // n_ffn_down
  int i_ffn_down = 0;
  int n_expert = 0;  // hparams.n_expert (expert_count; 0 for a dense model)
  bool is_70b = false;  // llama.cpp's LLM_TYPE_70B
};

// The state for the tensors `gguf_names` of a model with `n_layer` layers and `n_expert` experts.
GgufMixState gguf_mix_state(const std::vector<std::string>& gguf_names, int n_layer, int n_expert, bool is_70b);

// Whether llama.cpp types the model LLM_TYPE_70B (models/llama.cpp, qwen2.cpp): 80 layers, with
// fewer kv heads than heads for "llama" (unless it has 8 experts: an 8x model's type); "qwen2" at
// 80 layers; never "qwen3" or "qwen3moe".
bool gguf_is_70b(const std::string& architecture, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
                 int64_t n_expert);

// The quantizer's type for tensor `name` (`row_length` = ne[0], `dims` its dimension count) whose
// type in the F16 file is `source_type`; call in gguf_quantizer_order.
GgmlType gguf_mix_tensor_type(const GgufQuantMix& mix, GgufMixState& state, const std::string& name,
                              int64_t row_length, int64_t dims, GgmlType source_type);

}  // namespace finetune
