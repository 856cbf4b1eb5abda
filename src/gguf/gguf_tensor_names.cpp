#include "finetune/gguf/gguf_tensor_names.h"

#include <cmath>
#include <map>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// Per-layer module -> GGUF block tensor (gguf-py tensor_mapping.py's entries for these families).
const std::map<std::string, std::string>& layer_tensor_names() {
  static const std::map<std::string, std::string> names = {
      {"input_layernorm", "attn_norm"},       {"post_attention_layernorm", "ffn_norm"},
      {"self_attn.q_proj", "attn_q"},         {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},         {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},    {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},          {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
  };
  return names;
}

}  // namespace

std::string gguf_architecture(const ModelConfig& config, const std::string& source) {
  if (config.model_type == "llama" || config.model_type == "mistral") return "llama";
  if (config.model_type == "qwen2" || config.model_type == "qwen3") return config.model_type;
  throw Error(source + ": model_type '" + config.model_type +
              "' has no GGUF export (supported: llama, mistral, qwen2, qwen3)");
}

std::string gguf_tensor_name(const std::string& hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (starts_with(hf_name, prefix)) {
    const size_t dot = hf_name.find('.', prefix.size());
    const size_t last = hf_name.rfind('.');
    if (dot != std::string::npos && last > dot) {
      const std::string layer = hf_name.substr(prefix.size(), dot - prefix.size());
      const std::string module = hf_name.substr(dot + 1, last - dot - 1);
      const std::string suffix = hf_name.substr(last);  // ".weight" | ".bias"
      auto it = layer_tensor_names().find(module);
      if (it != layer_tensor_names().end() && (suffix == ".weight" || suffix == ".bias")) {
        return "blk." + layer + "." + it->second + suffix;
      }
    }
  }
  throw Error("GGUF export: tensor '" + hf_name + "' has no GGUF name");
}

at::Tensor gguf_permute_qk(const at::Tensor& weight, int64_t n_head) {
  const int64_t rows = weight.size(0);
  if (rows % (2 * n_head) != 0) {
    throw Error("GGUF export: " + std::to_string(rows) + " rows do not split into " + std::to_string(n_head) +
                " heads of rotary pairs");
  }
  std::vector<int64_t> split = {n_head, 2, rows / n_head / 2};
  for (int64_t d = 1; d < weight.dim(); ++d) split.push_back(weight.size(d));
  return weight.reshape(split).transpose(1, 2).reshape(weight.sizes()).contiguous();
}

int64_t gguf_permute_heads(const std::string& architecture, const ModelConfig& config, const std::string& hf_name) {
  if (architecture != "llama") return 0;
  if (ends_with(hf_name, "q_proj.weight") || ends_with(hf_name, "q_proj.bias")) return config.num_attention_heads;
  if (ends_with(hf_name, "k_proj.weight") || ends_with(hf_name, "k_proj.bias")) return config.num_key_value_heads;
  return 0;
}

at::Tensor gguf_rope_freqs(const ModelConfig& config) {
  const auto& rope = config.rope_scaling;
  if (rope.rope_type != "llama3") return {};
  // The converter's arithmetic step by step: float32 0-d tensors, Python's `scalar / t` being
  // t.reciprocal() * scalar.
  const int64_t dim = config.head_dim;
  const auto freqs = at::pow(config.rope_theta, at::arange(0, dim, 2, at::kFloat) / dim).reciprocal();  // (dim/2)
  const double old_context_len = static_cast<double>(rope.original_max_position_embeddings);
  const double low_freq_wavelen = old_context_len / rope.low_freq_factor;
  const double high_freq_wavelen = old_context_len / rope.high_freq_factor;
  auto out = at::empty({freqs.numel()}, at::kFloat);
  for (int64_t i = 0; i < freqs.numel(); ++i) {
    const auto wavelen = freqs[i].reciprocal() * (2 * M_PI);
    if (wavelen.lt(high_freq_wavelen).item<bool>()) {
      out[i] = 1.0;
    } else if (wavelen.gt(low_freq_wavelen).item<bool>()) {
      out[i] = rope.factor;
    } else {
      const auto smooth = (wavelen.reciprocal() * old_context_len - rope.low_freq_factor) /
                          (rope.high_freq_factor - rope.low_freq_factor);
      out[i] = (at::rsub(smooth, 1.0) / rope.factor + smooth).reciprocal();
    }
  }
  return out;
}

}  // namespace finetune
