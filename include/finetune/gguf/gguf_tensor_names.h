// Hugging Face decoder tensors -> llama.cpp's GGUF tensors, as convert_hf_to_gguf.py maps them
// for LlamaModel (Llama, Mistral, Mixtral: architecture "llama"), Qwen2Model/Qwen3Model ("qwen2",
// "qwen3"), Qwen3MoeModel ("qwen3moe"), Phi3MiniModel ("phi3": fused attn_qkv, gate_up as ffn_up), Gemma2Model and
// Gemma3Model ("gemma2", "gemma3"): the names (gguf-py constants.TENSOR_NAMES), Llama's q/k row
// permutation (llama.cpp's rope rotates interleaved pairs, HF's rotates halves), Gemma's norms
// written as 1 + w, and the extra tensors of generate_extra_tensors (rope_freqs of Llama-3 rope
// scaling, Phi-3's longrope factors).
//
// Note [GGUF expert tensors]
// A MoE layer's tensors (Note [Expert tensors] in model/architecture.h) become llama.cpp's
// blk.N.ffn_gate_inp.weight (the router, (E, C)), ffn_gate_exps / ffn_up_exps ((E, I, C): the gate
// and up rows of mlp.experts.gate_up_proj) and ffn_down_exps ((E, C, I)). The converter reads the
// checkpoint's per-expert tensors in sorted name order and stacks a layer's experts when the last
// of them arrives, writing the three stacks in its checkpoint leaf names' order (Qwen3-MoE:
// down_proj, gate_proj, up_proj; Mixtral: w1 gate, w2 down, w3 up); every tensor's place in the
// file is therefore that of a checkpoint name (GgufTensorPart::converter_position).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/model/architecture.h"

namespace finetune {

// The architecture's GGUF general.architecture from the name table (model/architecture.h: "llama"
// for Llama and Mistral, "qwen2", "qwen3"); Error naming `source` and the architecture otherwise.
std::string gguf_architecture(const ModelConfig& config, const std::string& source);

// "model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight" by the architecture's table
// entry; Error for a tensor with no GGUF counterpart.
std::string gguf_tensor_name(const Architecture& architecture, const std::string& hf_name);

// One GGUF tensor cut from a model tensor: its name, the rows it takes of dim 1 (rows 0: the whole
// tensor), and where the converter writes it (Note [GGUF expert tensors]): files order tensors by
// (converter_position, converter_rank).
struct GgufTensorPart {
  std::string gguf_name;
  int64_t row_begin = 0;
  int64_t rows = 0;
  std::string converter_position;  // the checkpoint name at which the converter emits the tensor
  std::string converter_rank;      // among the tensors emitted there: the checkpoint leaf name
};

// The GGUF tensors of model tensor `hf_name`: one for a dense tensor (gguf_tensor_name, at its own
// name), the expert stacks' as Note [GGUF expert tensors] says. Error for a tensor with no GGUF
// counterpart.
std::vector<GgufTensorPart> gguf_tensor_parts(const Architecture& architecture, const ModelConfig& config,
                                              const std::string& hf_name);

// LlamaModel.permute: rows (n_head, 2, head_dim / 2) -> (n_head, head_dim / 2, 2), for q
// (n_head heads) and k (n_head_kv heads) weights (out, in) and biases (out).
at::Tensor gguf_permute_qk(const at::Tensor& weight, int64_t n_head);

// Whether `hf_name` is permuted for GGUF `architecture` and with how many heads (0: not
// permuted): the table's q (heads) and k (kv heads) projections where it says gguf_permutes_qk.
int64_t gguf_permute_heads(const std::string& architecture, const ModelConfig& config, const std::string& hf_name);

// rope_freqs.weight (head_dim / 2 float32 factors) for rope_type "llama3"; undefined tensor otherwise.
at::Tensor gguf_rope_freqs(const ModelConfig& config);

// generate_extra_tensors for GGUF `architecture`, in the converter's order: rope_freqs.weight
// (gguf_rope_freqs), or for phi3 with longrope long factors rope_factors_long.weight and
// rope_factors_short.weight (config.json's lists as float32; Error when their lengths are not the
// rotary dimension count / 2, as the converter's).
std::vector<std::pair<std::string, at::Tensor>> gguf_extra_tensors(const ModelConfig& config,
                                                                  const std::string& architecture);

// Whether the converter writes `hf_name` as 1 + w (Gemma's modify_tensors: names ending in
// "norm.weight" of an architecture whose RMSNorm scales by 1 + w).
bool gguf_shifts_norm(const Architecture& architecture, const std::string& hf_name);

// 1 + w, in float32 unless `w` is float16 (the converter's prepare_tensors turns every other
// dtype into float32 before modify_tensors adds 1).
at::Tensor gguf_shift_norm(const at::Tensor& w);

}  // namespace finetune
