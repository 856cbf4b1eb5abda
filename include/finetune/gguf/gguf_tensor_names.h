// Hugging Face decoder tensors -> llama.cpp's GGUF tensors, as convert_hf_to_gguf.py maps them
// for LlamaModel (Llama, Mistral: architecture "llama") and Qwen2Model/Qwen3Model ("qwen2",
// "qwen3"): the names (gguf-py constants.TENSOR_NAMES), Llama's q/k row permutation (llama.cpp's
// rope rotates interleaved pairs, HF's rotates halves), and the rope_freqs tensor of Llama-3
// rope scaling (LlamaModel.generate_extra_tensors).
#pragma once

#include <string>
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

// LlamaModel.permute: rows (n_head, 2, head_dim / 2) -> (n_head, head_dim / 2, 2), for q
// (n_head heads) and k (n_head_kv heads) weights (out, in) and biases (out).
at::Tensor gguf_permute_qk(const at::Tensor& weight, int64_t n_head);

// Whether `hf_name` is permuted for GGUF `architecture` and with how many heads (0: not
// permuted): the table's q (heads) and k (kv heads) projections where it says gguf_permutes_qk.
int64_t gguf_permute_heads(const std::string& architecture, const ModelConfig& config, const std::string& hf_name);

// rope_freqs.weight (head_dim / 2 float32 factors) for rope_type "llama3"; undefined tensor otherwise.
at::Tensor gguf_rope_freqs(const ModelConfig& config);

}  // namespace finetune
