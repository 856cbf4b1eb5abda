#include "finetune/gguf/gguf_tensor_names.h"

#include <algorithm>
#include <cmath>

#include "finetune/model/architecture.h"
#include "finetune/model/moe_names.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// "model.layers.3.self_attn.q_proj.weight" -> layer "3", module path "self_attn.q_proj", suffix
// ".weight"; false for a tensor outside the layers or with another suffix.
bool split_layer_tensor_name(const Architecture& architecture, const std::string& hf_name, std::string& layer,
                             std::string& path, std::string& suffix) {
  const std::string& prefix = architecture.layer_prefix;
  if (!starts_with(hf_name, prefix)) return false;
  const size_t dot = hf_name.find('.', prefix.size());
  const size_t last = hf_name.rfind('.');
  if (dot == std::string::npos || last <= dot) return false;
  layer = hf_name.substr(prefix.size(), dot - prefix.size());
  path = hf_name.substr(dot + 1, last - dot - 1);
  suffix = hf_name.substr(last);
  return suffix == ".weight" || suffix == ".bias";
}

const LayerModule* find_layer_module(const Architecture& architecture, const std::string& path) {
  for (const auto& module : architecture.layer_modules)
    if (module.path == path) return &module;
  return nullptr;
}

// The GGUF name under `architecture`'s table, or empty when it has none.
std::string table_tensor_name(const Architecture& architecture, const std::string& hf_name) {
  if (hf_name == architecture.embed_tokens) return "token_embd.weight";
  if (hf_name == architecture.final_norm) return "output_norm.weight";
  if (hf_name == architecture.lm_head) return "output.weight";
  std::string layer, path, suffix;
  if (!split_layer_tensor_name(architecture, hf_name, layer, path, suffix)) return "";
  const LayerModule* module = find_layer_module(architecture, path);
  return module ? "blk." + layer + "." + module->gguf_name + suffix : "";
}

// The last (in sorted order) of the checkpoint tensors holding the expert stacks of the layer
// whose stacks live under `experts_prefix` ("model.layers.3.mlp.experts"): where the converter
// has a layer's experts all read and writes their stacks.
std::string last_expert_checkpoint_name(const Architecture& architecture, const ModelConfig& config,
                                        const std::string& experts_prefix) {
  std::string last;
  for (const char* stack : {".gate_up_proj", ".down_proj"})
    for (const auto& piece : checkpoint_pieces(architecture, config, experts_prefix + stack))
      last = std::max(last, piece.name);
  return last;
}

// The GGUF tensors of a MoE layer's router or expert stack; empty for any other tensor.
std::vector<GgufTensorPart> moe_tensor_parts(const Architecture& architecture, const ModelConfig& config,
                                             const std::string& hf_name) {
  if (!architecture.moe || !config.moe || !starts_with(hf_name, architecture.layer_prefix)) return {};
  const MoeLayout& moe = *architecture.moe;
  const size_t dot = hf_name.find('.', architecture.layer_prefix.size());
  if (dot == std::string::npos) return {};
  const std::string layer_path = hf_name.substr(0, dot + 1);  // "model.layers.3."
  const std::string block = "blk." + hf_name.substr(architecture.layer_prefix.size(), dot + 1 - architecture.layer_prefix.size());
  if (hf_name == layer_path + moe.router + ".weight") {
    return {{block + "ffn_gate_inp.weight", 0, 0, checkpoint_pieces(architecture, config, hf_name).front().name, ""}};
  }
  const std::string experts_prefix = layer_path + moe.experts;
  const int64_t width = config.moe->moe_intermediate_size;
  if (hf_name == experts_prefix + ".gate_up_proj") {
    const auto position = last_expert_checkpoint_name(architecture, config, experts_prefix);
    return {{block + "ffn_gate_exps.weight", 0, width, position, moe.checkpoint_gate},
            {block + "ffn_up_exps.weight", width, width, position, moe.checkpoint_up}};
  }
  if (hf_name == experts_prefix + ".down_proj") {
    const auto position = last_expert_checkpoint_name(architecture, config, experts_prefix);
    return {{block + "ffn_down_exps.weight", 0, 0, position, moe.checkpoint_down}};
  }
  return {};
}

}  // namespace

std::string gguf_architecture(const ModelConfig& config, const std::string& source) {
  const Architecture* architecture = find_architecture_by_class(config.architecture);
  if (!architecture) {
    throw Error(source + ": architecture '" + config.architecture + "' has no GGUF export (supported: " +
                supported_architecture_names() + ")");
  }
  if (architecture->gguf_architecture.empty()) {
    std::string supported;
    for (const auto& entry : architectures())
      if (!entry.gguf_architecture.empty()) supported += (supported.empty() ? "" : ", ") + entry.class_names.front();
    throw Error(source + ": " + config.architecture + " has no GGUF export yet (llama.cpp's converter writes metadata "
                "for it that finetune does not); GGUF export supports " + supported);
  }
  return architecture->gguf_architecture;
}

std::string gguf_tensor_name(const Architecture& architecture, const std::string& hf_name) {
  auto name = table_tensor_name(architecture, hf_name);
  if (name.empty()) throw Error("GGUF export: tensor '" + hf_name + "' has no GGUF name");
  return name;
}

std::vector<GgufTensorPart> gguf_tensor_parts(const Architecture& architecture, const ModelConfig& config,
                                              const std::string& hf_name) {
  auto parts = moe_tensor_parts(architecture, config, hf_name);
  if (parts.empty()) parts.push_back({gguf_tensor_name(architecture, hf_name), 0, 0, hf_name, ""});
  return parts;
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
  const Architecture* entry = find_architecture_by_class(config.architecture);
  if (!entry || !entry->gguf_permutes_qk || architecture != entry->gguf_architecture) return 0;
  std::string layer, path, suffix;
  if (!split_layer_tensor_name(*entry, hf_name, layer, path, suffix)) return 0;
  const LayerModule* module = find_layer_module(*entry, path);
  if (!module || module->roles.size() != 1) return 0;
  if (module->roles.front() == ModuleRole::kQuery) return config.num_attention_heads;
  if (module->roles.front() == ModuleRole::kKey) return config.num_key_value_heads;
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

std::vector<std::pair<std::string, at::Tensor>> gguf_extra_tensors(const ModelConfig& config,
                                                                  const std::string& architecture) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (const auto rope_freqs = gguf_rope_freqs(config); rope_freqs.defined()) out.emplace_back("rope_freqs.weight", rope_freqs);
  const auto& rope = config.rope_scaling;
  if (architecture != "phi3" || rope.long_factor.empty()) return out;
  const auto rope_dims = static_cast<int64_t>(config.partial_rotary_factor * static_cast<double>(config.hidden_size)) /
                         config.num_attention_heads;
  if (static_cast<int64_t>(rope.long_factor.size()) * 2 != rope_dims ||
      rope.short_factor.size() != rope.long_factor.size()) {
    throw Error("GGUF export: longrope long_factor / short_factor must have " + std::to_string(rope_dims / 2) +
                " entries (llama.cpp's rotary dimensions / 2), they have " + std::to_string(rope.long_factor.size()) +
                " and " + std::to_string(rope.short_factor.size()));
  }
  auto factors = [](const std::vector<double>& values) {
    return at::tensor(at::ArrayRef<double>(values), at::kDouble).to(at::kFloat);
  };
  out.emplace_back("rope_factors_long.weight", factors(rope.long_factor));
  out.emplace_back("rope_factors_short.weight", factors(rope.short_factor));
  return out;
}

bool gguf_shifts_norm(const Architecture& architecture, const std::string& hf_name) {
  return architecture.rms_norm_unit_offset && ends_with(hf_name, "norm.weight");
}

at::Tensor gguf_shift_norm(const at::Tensor& w) {
  const auto values = w.scalar_type() == at::kHalf || w.scalar_type() == at::kFloat ? w : w.to(at::kFloat);
  return values + 1;
}

}  // namespace finetune
