#include "finetune/gguf/gguf_model_keys.h"

#include <cmath>
#include <variant>
#include <vector>

#include "finetune/gguf/gguf_export.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using json = nlohmann::json;

constexpr uint32_t kGgmlQuantizationVersion = 2;  // gguf-py GGML_QUANT_VERSION

// The converter's key list: a key set twice keeps its first place and takes the last value
// (GGUFWriter.add_key_value's dict), so a family can set a key its base class already set.
class KeyList {
 public:
  void set_uint32(const std::string& key, uint32_t value) { set(key, value); }
  void set_float32(const std::string& key, float value) { set(key, value); }
  void set_string(const std::string& key, const std::string& value) { set(key, value); }
  bool has(const std::string& key) const {
    for (const auto& entry : entries_)
      if (entry.first == key) return true;
    return false;
  }
  void write(GgufFileWriter& writer) const {
    for (const auto& [key, value] : entries_) {
      if (const auto* u = std::get_if<uint32_t>(&value)) writer.add_uint32(key, *u);
      if (const auto* f = std::get_if<float>(&value)) writer.add_float32(key, *f);
      if (const auto* s = std::get_if<std::string>(&value)) writer.add_string(key, *s);
    }
  }

 private:
  using Value = std::variant<uint32_t, float, std::string>;
  void set(const std::string& key, Value value) {
    for (auto& entry : entries_) {
      if (entry.first == key) {
        entry.second = std::move(value);
        return;
      }
    }
    entries_.emplace_back(key, std::move(value));
  }
  std::vector<std::pair<std::string, Value>> entries_;
};

bool is_number(const json& object, const std::string& key) {
  return object.is_object() && object.contains(key) && object[key].is_number();
}

uint32_t as_uint32(const json& value, const std::string& key) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    throw Error("GGUF export: config.json " + key + ": expected a non-negative integer, got " + value.dump());
  }
  return value.get<uint32_t>();
}

uint32_t required_uint32(const json& hparams, const std::string& key) {
  if (!hparams.contains(key)) throw Error("GGUF export: config.json has no " + key + " (llama.cpp's converter needs it)");
  return as_uint32(hparams[key], key);
}

float required_float(const json& object, const std::string& key) {
  if (!is_number(object, key)) throw Error("GGUF export: config.json " + key + ": expected a number");
  return object[key].get<float>();
}

// TextModel.__init__'s rope_parameters: rope_parameters (or rope_scaling), with the top-level
// rope keys mirrored into it unless it is split per layer type.
json converter_rope_parameters(const json& hparams) {
  json rope = hparams.contains("rope_parameters") ? hparams["rope_parameters"]
                                                  : hparams.value("rope_scaling", json());
  if (!rope.is_object()) rope = json::object();
  if (rope.contains("full_attention") || rope.contains("sliding_attention")) return rope;
  auto first = [&](std::initializer_list<const char*> keys) {
    for (const char* key : keys)
      if (hparams.contains(key)) return hparams[key];
    return json();
  };
  const json local = first({"local_rope_theta", "rope_local_theta", "rope_theta_local", "swa_rope_theta",
                            "rope_local_base_freq"});
  const json theta = first({"global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta",
                            "rotary_emb_base"});
  if (!local.is_null()) rope["sliding_attention"] = {{"rope_theta", local}};
  if (!rope.contains("rope_theta") && !theta.is_null()) rope["rope_theta"] = theta;
  if (!rope.contains("rope_type") && rope.contains("type") && !rope["type"].is_null()) rope["rope_type"] = rope["type"];
  for (const char* key : {"partial_rotary_factor", "original_max_position_embeddings"}) {
    const json value = first({key});
    if (!rope.contains(key) && !value.is_null()) rope[key] = value;
  }
  return rope;
}

void add_general_keys(KeyList& keys, const std::string& model_name) {
  keys.set_string("general.type", "model");
  keys.set_string("general.name", gguf_model_name(model_name));
}

// TextModel.set_gguf_parameters (with its expert counts for a MoE config) + LlamaModel's additions
// (llama, Mixtral's llama with experts, qwen2, qwen3) or Qwen2MoeModel's (qwen3moe).
void add_llama_keys(KeyList& keys, const ModelConfig& config, const std::string& arch, std::optional<GgmlType> type) {
  const auto& raw = config.raw;
  keys.set_uint32(arch + ".block_count", static_cast<uint32_t>(config.num_hidden_layers));
  keys.set_uint32(arch + ".context_length", static_cast<uint32_t>(config.max_position_embeddings));
  keys.set_uint32(arch + ".embedding_length", static_cast<uint32_t>(config.hidden_size));
  keys.set_uint32(arch + ".feed_forward_length", static_cast<uint32_t>(config.intermediate_size));
  keys.set_uint32(arch + ".attention.head_count", static_cast<uint32_t>(config.num_attention_heads));
  keys.set_uint32(arch + ".attention.head_count_kv", static_cast<uint32_t>(config.num_key_value_heads));
  if (config.rope_scaling.rope_type == "linear") {
    keys.set_string(arch + ".rope.scaling.type", "linear");
    keys.set_float32(arch + ".rope.scaling.factor", static_cast<float>(config.rope_scaling.factor));
  }
  keys.set_float32(arch + ".rope.freq_base", static_cast<float>(config.rope_theta));
  keys.set_float32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(config.rms_norm_eps));
  if (config.moe) {
    keys.set_uint32(arch + ".expert_count", static_cast<uint32_t>(config.moe->num_experts));
    keys.set_uint32(arch + ".expert_used_count", static_cast<uint32_t>(config.moe->num_experts_per_tok));
  }
  if (raw.contains("head_dim") && raw["head_dim"].is_number_integer()) {
    keys.set_uint32(arch + ".attention.key_length", raw["head_dim"].get<uint32_t>());
    keys.set_uint32(arch + ".attention.value_length", raw["head_dim"].get<uint32_t>());
  }
  if (type) keys.set_uint32("general.file_type", llama_file_type(*type));
  if (arch == "llama") {
    keys.set_uint32(arch + ".vocab_size", static_cast<uint32_t>(config.vocab_size));
    keys.set_uint32(arch + ".rope.dimension_count", static_cast<uint32_t>(config.head_dim));
  }
  if (arch == "qwen3moe") {  // Qwen2MoeModel's additions
    for (const auto& [key, name] : {std::pair<const char*, const char*>{"moe_intermediate_size", ".expert_feed_forward_length"},
                                    {"shared_expert_intermediate_size", ".expert_shared_feed_forward_length"}}) {
      if (raw.contains(key) && !raw[key].is_null()) keys.set_uint32(arch + name, as_uint32(raw[key], key));
    }
  }
}

// Phi3MiniModel.generate_extra_tensors' attention factor of longrope (or yarn) scaling; nullopt
// when the config has no long factors.
std::optional<float> phi3_rope_attn_factor(const json& hparams, const json& rope) {
  if (!rope.contains("long_factor") || !rope["long_factor"].is_array() || rope["long_factor"].empty()) return std::nullopt;
  const double max_positions = required_uint32(hparams, "max_position_embeddings");
  const double original = required_float(rope, "original_max_position_embeddings");
  const double scale = max_positions / original;
  std::string rope_type = rope.value("rope_type", std::string());
  for (auto& c : rope_type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (rope_type == "su" || rope_type == "longrope") {
    return static_cast<float>(scale > 1.0 ? std::sqrt(1 + std::log(scale) / std::log(original)) : 1.0);
  }
  if (rope_type == "yarn") return static_cast<float>(scale > 1.0 ? 0.1 * std::log(scale) + 1.0 : 1.0);
  throw Error("GGUF export: config.json rope type '" + rope_type + "' with long factors has no llama.cpp form");
}

// Phi3MiniModel.set_gguf_parameters (without TextModel's).
void add_phi3_keys(KeyList& keys, const json& hparams, const json& rope, const std::string& arch,
                   std::optional<GgmlType> type) {
  const uint32_t n_embd = required_uint32(hparams, "hidden_size");
  const uint32_t n_head = required_uint32(hparams, "num_attention_heads");
  const double rot_pct = is_number(rope, "partial_rotary_factor") ? rope["partial_rotary_factor"].get<double>() : 1.0;
  keys.set_uint32(arch + ".context_length", required_uint32(hparams, "max_position_embeddings"));
  if (!rope.contains("original_max_position_embeddings")) {
    throw Error("GGUF export: config.json has no original_max_position_embeddings (llama.cpp's converter needs it "
                "for Phi-3)");
  }
  keys.set_uint32(arch + ".rope.scaling.original_context_length",
                  as_uint32(rope["original_max_position_embeddings"], "original_max_position_embeddings"));
  keys.set_uint32(arch + ".embedding_length", n_embd);
  keys.set_uint32(arch + ".feed_forward_length", required_uint32(hparams, "intermediate_size"));
  keys.set_uint32(arch + ".block_count", required_uint32(hparams, "num_hidden_layers"));
  keys.set_uint32(arch + ".attention.head_count", n_head);
  keys.set_uint32(arch + ".attention.head_count_kv", required_uint32(hparams, "num_key_value_heads"));
  keys.set_float32(arch + ".attention.layer_norm_rms_epsilon", required_float(hparams, "rms_norm_eps"));
  keys.set_uint32(arch + ".rope.dimension_count",
                  static_cast<uint32_t>(static_cast<int64_t>(rot_pct * n_embd) / n_head));
  keys.set_float32(arch + ".rope.freq_base", required_float(rope, "rope_theta"));
  if (type) keys.set_uint32("general.file_type", llama_file_type(*type));
  const json window = hparams.value("sliding_window", json());
  keys.set_uint32(arch + ".attention.sliding_window", window.is_null() ? 0 : as_uint32(window, "sliding_window"));
}

// Gemma2Model.set_gguf_parameters (without TextModel's).
void add_gemma2_keys(KeyList& keys, const json& hparams, const std::string& arch, std::optional<GgmlType> type) {
  keys.set_uint32(arch + ".context_length", required_uint32(hparams, "max_position_embeddings"));
  keys.set_uint32(arch + ".embedding_length", required_uint32(hparams, "hidden_size"));
  keys.set_uint32(arch + ".block_count", required_uint32(hparams, "num_hidden_layers"));
  keys.set_uint32(arch + ".feed_forward_length", required_uint32(hparams, "intermediate_size"));
  keys.set_uint32(arch + ".attention.head_count", required_uint32(hparams, "num_attention_heads"));
  keys.set_uint32(arch + ".attention.head_count_kv",
                  required_uint32(hparams, hparams.contains("num_key_value_heads") ? "num_key_value_heads"
                                                                                   : "num_attention_heads"));
  keys.set_float32(arch + ".attention.layer_norm_rms_epsilon", required_float(hparams, "rms_norm_eps"));
  keys.set_uint32(arch + ".attention.key_length", required_uint32(hparams, "head_dim"));
  keys.set_uint32(arch + ".attention.value_length", required_uint32(hparams, "head_dim"));
  if (type) keys.set_uint32("general.file_type", llama_file_type(*type));
  // The converter writes both soft-caps unconditionally (a null one would stop it); llama.cpp
  // reads them as optional, so a null cap is left out.
  if (is_number(hparams, "attn_logit_softcapping"))
    keys.set_float32(arch + ".attn_logit_softcapping", hparams["attn_logit_softcapping"].get<float>());
  if (is_number(hparams, "final_logit_softcapping"))
    keys.set_float32(arch + ".final_logit_softcapping", hparams["final_logit_softcapping"].get<float>());
  keys.set_uint32(arch + ".attention.sliding_window", required_uint32(hparams, "sliding_window"));
}

// TextModel.set_gguf_parameters for the keys a Gemma-3 config has, then Gemma3Model's own.
void add_gemma3_keys(KeyList& keys, const json& hparams, const json& rope, const std::string& arch,
                     std::optional<GgmlType> type) {
  keys.set_uint32(arch + ".block_count", required_uint32(hparams, "num_hidden_layers"));
  for (const auto& [key, name] : {std::pair<const char*, const char*>{"max_position_embeddings", ".context_length"},
                                  {"hidden_size", ".embedding_length"},
                                  {"intermediate_size", ".feed_forward_length"},
                                  {"num_attention_heads", ".attention.head_count"},
                                  {"num_key_value_heads", ".attention.head_count_kv"}}) {
    if (hparams.contains(key)) keys.set_uint32(arch + name, as_uint32(hparams[key], key));
  }
  const json& full = rope.contains("full_attention") ? rope["full_attention"] : rope;
  if (full.value("rope_type", std::string()) == "linear" && is_number(full, "factor")) {
    keys.set_string(arch + ".rope.scaling.type", "linear");
    keys.set_float32(arch + ".rope.scaling.factor", full["factor"].get<float>());
  } else if (full.contains("rope_type") && full["rope_type"] != "default" && !full["rope_type"].is_null()) {
    throw Error("GGUF export: config.json rope type " + full["rope_type"].dump() + " has no Gemma-3 GGUF form here");
  }
  if (is_number(full, "rope_theta")) keys.set_float32(arch + ".rope.freq_base", full["rope_theta"].get<float>());
  if (rope.contains("sliding_attention") && is_number(rope["sliding_attention"], "rope_theta"))
    keys.set_float32(arch + ".rope.freq_base_swa", rope["sliding_attention"]["rope_theta"].get<float>());
  if (is_number(hparams, "rms_norm_eps"))
    keys.set_float32(arch + ".attention.layer_norm_rms_epsilon", hparams["rms_norm_eps"].get<float>());
  if (hparams.contains("head_dim") && !hparams["head_dim"].is_null()) {
    keys.set_uint32(arch + ".attention.key_length", as_uint32(hparams["head_dim"], "head_dim"));
    keys.set_uint32(arch + ".attention.value_length", as_uint32(hparams["head_dim"], "head_dim"));
  }
  if (type) keys.set_uint32("general.file_type", llama_file_type(*type));
  // Gemma3Model: its defaults over TextModel's values.
  auto u32_or = [&](const char* key, uint32_t fallback) {
    return hparams.contains(key) ? as_uint32(hparams[key], key) : fallback;
  };
  keys.set_uint32(arch + ".context_length", u32_or("max_position_embeddings", 131072));
  keys.set_uint32(arch + ".attention.head_count", u32_or("num_attention_heads", 8));
  keys.set_float32(arch + ".attention.layer_norm_rms_epsilon",
                   is_number(hparams, "rms_norm_eps") ? hparams["rms_norm_eps"].get<float>() : 1e-6f);
  keys.set_uint32(arch + ".attention.key_length", u32_or("head_dim", 256));
  keys.set_uint32(arch + ".attention.value_length", u32_or("head_dim", 256));
  keys.set_float32(arch + ".rope.freq_base", is_number(full, "rope_theta") ? full["rope_theta"].get<float>() : 1e6f);
  if (is_number(hparams, "final_logit_softcapping") && hparams["final_logit_softcapping"].get<double>() != 0)
    keys.set_float32(arch + ".final_logit_softcapping", hparams["final_logit_softcapping"].get<float>());
  if (hparams.value("sliding_window_pattern", json()) != json(1))
    keys.set_uint32(arch + ".attention.sliding_window", required_uint32(hparams, "sliding_window"));
  keys.set_uint32(arch + ".attention.head_count_kv", u32_or("num_key_value_heads", 4));
}

// What llama.cpp's qwen3moe and llama (Mixtral) builders fix that a MoE config could set otherwise:
// every layer sparse, the top-k weights renormalised (build_moe_ffn's norm_w is true for both), and
// no sliding window (llama has none; the converter writes no window key).
void check_gguf_moe_representable(const ModelConfig& config, const std::string& arch, const std::string& source) {
  const std::string prefix = source + ": " + config.architecture + ": ";
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (!layer_is_sparse(config, layer)) {
      throw Error(prefix + "layer " + std::to_string(layer) + " is a dense MLP layer (mlp_only_layers / "
                  "decoder_sparse_step), but llama.cpp's " + arch + " runs experts in every layer and the converter "
                  "writes no key that could say otherwise");
    }
  }
  if (!config.moe->norm_topk_prob) {
    throw Error(prefix + "norm_topk_prob is false, but llama.cpp's " + arch + " always renormalises the top-" +
                std::to_string(config.moe->num_experts_per_tok) + " routing weights to sum to 1 (no GGUF key can say "
                "otherwise)");
  }
  if (config.sliding_window) {
    throw Error(prefix + "sliding_window " + std::to_string(*config.sliding_window) + " is set, but llama.cpp's " +
                arch + " has no sliding-window attention for this model (the converter writes no window key): it "
                "would attend to every earlier position");
  }
}

}  // namespace

nlohmann::json gguf_converter_hparams(const ModelConfig& config) {
  json hparams = config.raw.is_object() ? config.raw : json::object();
  if (hparams.contains("text_config") && hparams["text_config"].is_object()) {
    for (const auto& [key, value] : hparams["text_config"].items()) hparams[key] = value;
  }
  return hparams;
}

void add_gguf_model_keys(GgufFileWriter& writer, const ModelConfig& config, const std::string& arch,
                         const std::string& model_name, std::optional<GgmlType> type) {
  const json hparams = gguf_converter_hparams(config);
  const json rope = converter_rope_parameters(hparams);
  KeyList keys;
  keys.set_string("general.architecture", arch);
  if (arch == "phi3") {
    if (const auto factor = phi3_rope_attn_factor(hparams, rope)) keys.set_float32(arch + ".rope.scaling.attn_factor", *factor);
  }
  add_general_keys(keys, model_name);
  if (arch == "phi3") {
    add_phi3_keys(keys, hparams, rope, arch, type);
  } else if (arch == "gemma2") {
    add_gemma2_keys(keys, hparams, arch, type);
  } else if (arch == "gemma3") {
    add_gemma3_keys(keys, hparams, rope, arch, type);
  } else {
    add_llama_keys(keys, config, arch, type);
  }
  if (type) keys.set_uint32("general.quantization_version", kGgmlQuantizationVersion);
  keys.write(writer);
}

void check_gguf_model_representable(const ModelConfig& config, const std::string& arch, const std::string& source) {
  if (config.moe) check_gguf_moe_representable(config, arch, source);
  const std::string& rope_type = config.rope_scaling.rope_type;
  if ((arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe") && rope_type != "default" &&
      rope_type != "linear" &&
      rope_type != "llama3") {
    throw Error(source + ": " + config.architecture + ": rope_scaling.rope_type '" + rope_type +
                "' has no GGUF form in this export (it writes linear and llama3 scaling; llama.cpp would run the "
                "model without it)");
  }
  if (arch != "gemma2" && arch != "gemma3") return;
  const std::string prefix = source + ": " + config.architecture + ": ";
  if (arch == "gemma2" && !config.tie_word_embeddings) {
    throw Error(prefix + "tie_word_embeddings is false, but llama.cpp's gemma2 has no output tensor (it multiplies by "
                "token_embd, and the converter drops lm_head): this model has no GGUF form");
  }
  const bool shape_27b = config.num_hidden_layers == (arch == "gemma2" ? 46 : 62);
  const double llama_cpp_scalar = shape_27b ? static_cast<double>(config.hidden_size / config.num_attention_heads)
                                            : static_cast<double>(config.head_dim);
  const double scalar = config.query_pre_attn_scalar.value_or(static_cast<double>(config.head_dim));
  if (scalar != llama_cpp_scalar) {
    throw Error(prefix + "query_pre_attn_scalar " + std::to_string(scalar) + " differs from the " +
                std::to_string(llama_cpp_scalar) + " llama.cpp's " + arch + " scales attention by (" +
                (shape_27b ? "hidden_size / num_attention_heads for its 27B shape" : "head_dim") +
                "; no GGUF key can say otherwise)");
  }
  const bool window_written = arch == "gemma2" || gguf_converter_hparams(config).value("sliding_window_pattern", json()) != json(1);
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    const bool llama_cpp_sliding = window_written && (arch == "gemma2" ? layer % 2 == 0 : layer % 6 < 5);
    if (llama_cpp_sliding != layer_is_sliding(config, layer)) {
      throw Error(prefix + "layer " + std::to_string(layer) + " is " +
                  (layer_is_sliding(config, layer) ? "a sliding-window" : "a full-attention") +
                  " layer, but llama.cpp's " + arch + " fixes the pattern (" +
                  (arch == "gemma2" ? "sliding on even layers" : "every 6th layer full, the others sliding") +
                  ") and the converter writes no key that could change it");
    }
  }
}

}  // namespace finetune
