// config.json -> ModelConfig, with transformers 5.17's per-architecture defaults for absent keys
// (checked against the Python config classes by tests/reference/make_config_fixtures.py).
#include "finetune/io/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "finetune/model/architecture.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

using nlohmann::json;

constexpr int64_t kMistralDefaultSlidingWindow = 4096;
constexpr int64_t kGemmaDefaultSlidingWindow = 4096;

// Typed access to config.json fields; every error names the file and the field.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix = "")
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const std::string& key) const { return object_.contains(key) && !object_.at(key).is_null(); }
  bool present(const std::string& key) const { return object_.contains(key); }  // null counts
  const json& at(const std::string& key) const { return object_.at(key); }

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw Error(source_ + ": field \"" + prefix_ + key + "\": " + problem);
  }

  int64_t integer(const std::string& key) const {
    if (!has(key)) fail(key, "missing (required)");
    return as_integer(key, at(key));
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    return has(key) ? as_integer(key, at(key)) : fallback;
  }
  int64_t positive_integer(const std::string& key) const { return check_positive(key, integer(key)); }
  int64_t positive_integer(const std::string& key, int64_t fallback) const {
    return check_positive(key, integer(key, fallback));
  }
  double number(const std::string& key) const {
    if (!has(key)) fail(key, "missing (required)");
    if (!at(key).is_number()) fail(key, "expected a number, got " + json_excerpt(at(key)));
    return at(key).get<double>();
  }
  double number(const std::string& key, double fallback) const { return has(key) ? number(key) : fallback; }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) fail(key, "expected true or false, got " + json_excerpt(at(key)));
    return at(key).get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_string()) fail(key, "expected a string, got " + json_excerpt(at(key)));
    return at(key).get<std::string>();
  }
  // Absent -> fallback; explicit null -> none (transformers passes the None through).
  std::optional<int64_t> optional_integer(const std::string& key, std::optional<int64_t> fallback) const {
    if (!present(key)) return fallback;
    if (at(key).is_null()) return std::nullopt;
    return as_integer(key, at(key));
  }
  // Python's int is unbounded; ours is int64: larger values (and floats beyond its range, whose
  // conversion would be undefined) are errors rather than wrapped or garbage values.
  int64_t as_integer(const std::string& key, const json& value) const {
    constexpr double kTwoTo63 = 9223372036854775808.0;
    if (value.is_number_unsigned()) {
      if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(key, "integer " + json_excerpt(value) + " is out of range");
      return value.get<int64_t>();
    }
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_number_float()) {
      const double d = value.get<double>();
      if (std::floor(d) == d && d >= -kTwoTo63 && d < kTwoTo63) return static_cast<int64_t>(d);
    }
    fail(key, "expected an integer, got " + json_excerpt(value));
  }

 private:
  int64_t check_positive(const std::string& key, int64_t value) const {
    if (value < 1) fail(key, "expected an integer >= 1, got " + std::to_string(value));
    return value;
  }

  const json& object_;
  std::string source_;
  std::string prefix_;
};

// The architecture table's entry (model/architecture.h) for architectures[0], or for model_type
// when the config names no class.
const Architecture& architecture_of_fields(const Fields& fields) {
  std::string class_name;
  if (fields.has("architectures")) {
    const json& list = fields.at("architectures");
    if (!list.is_array() || list.empty() || !list[0].is_string())
      fields.fail("architectures", "expected a non-empty list of names, got " + json_excerpt(list));
    class_name = list[0].get<std::string>();
  }
  const std::string model_type = fields.string("model_type", "");
  if (class_name.empty() && model_type.empty())
    fields.fail("architectures", "missing, and no model_type either; supported: " + supported_architecture_names());
  if (class_name.empty()) {
    if (const Architecture* architecture = find_architecture_by_model_type(model_type)) return *architecture;
    fields.fail("model_type", "unsupported model type \"" + model_type + "\"; supported architectures: " +
                                  supported_architecture_names());
  }
  const Architecture* architecture = find_architecture_by_class(class_name);
  if (!architecture)
    fields.fail("architectures", "unsupported architecture \"" + class_name + "\"; supported: " +
                                     supported_architecture_names());
  if (!model_type.empty() && model_type != architecture->model_type)
    fields.fail("model_type", "\"" + model_type + "\" does not match architecture " + class_name + " (expected \"" +
                                  architecture->model_type + "\")");
  return *architecture;
}

// A list of numbers of `length` (longrope's short_factor / long_factor).
std::vector<double> read_factor_list(const Fields& rope, const std::string& key, size_t length) {
  if (!rope.has(key) || !rope.at(key).is_array()) rope.fail(key, "expected a list of numbers");
  std::vector<double> values;
  for (const auto& value : rope.at(key)) {
    if (!value.is_number()) rope.fail(key, "expected a list of numbers, got " + json_excerpt(value));
    values.push_back(value.get<double>());
  }
  if (values.size() != length)
    rope.fail(key, "has " + std::to_string(values.size()) + " entries; the rotary dimensions need " + std::to_string(length));
  return values;
}

// Phi3Config's RoPE rules: rope_scaling (else rope_parameters) with rope_theta and
// partial_rotary_factor falling back to the top-level keys; types default and longrope ("su" and
// "yarn" are old names of longrope). longrope's original_max_position_embeddings is always the
// top-level key (Phi3Config's default 4096), whatever the rope dict says, and its factor defaults
// to max_position_embeddings / original_max_position_embeddings.
void read_phi3_rope(const Fields& fields, const std::string& source, ModelConfig& config) {
  json rope_json = json::object();
  std::string key = "rope_parameters";
  if (fields.has("rope_scaling") && !fields.at("rope_scaling").empty()) key = "rope_scaling";
  if (fields.has(key)) {
    if (!fields.at(key).is_object()) fields.fail(key, "expected an object, got " + json_excerpt(fields.at(key)));
    rope_json = fields.at(key);
  }
  const Fields rope(rope_json, source, key + ".");
  config.rope_theta = rope.number("rope_theta", fields.number("rope_theta", 10000.0));
  config.partial_rotary_factor = rope.number("partial_rotary_factor", fields.number("partial_rotary_factor", 1.0));
  const int64_t rotary_dim = static_cast<int64_t>(config.head_dim * config.partial_rotary_factor);
  if (!(config.partial_rotary_factor > 0 && config.partial_rotary_factor <= 1) || rotary_dim < 2 || rotary_dim % 2 != 0)
    fields.fail("partial_rotary_factor", "must give an even number of rotary dimensions in [2, head_dim]");
  RopeScaling& scaling = config.rope_scaling;
  const std::string type_key = rope.has("rope_type") ? "rope_type" : "type";
  scaling.rope_type = rope.string(type_key, "default");
  if (scaling.rope_type == "su" || scaling.rope_type == "yarn") scaling.rope_type = "longrope";
  // Phi3Config always has it; generation reads it too (Note [Phi-3 cache recompute] in generator.cpp).
  scaling.original_max_position_embeddings = fields.positive_integer("original_max_position_embeddings", 4096);
  if (scaling.rope_type == "default") return;
  if (scaling.rope_type != "longrope")
    rope.fail(type_key, "rope type \"" + scaling.rope_type + "\" is not supported for Phi-3 (default, longrope)");
  scaling.short_factor = read_factor_list(rope, "short_factor", static_cast<size_t>(rotary_dim / 2));
  scaling.long_factor = read_factor_list(rope, "long_factor", static_cast<size_t>(rotary_dim / 2));
  scaling.factor = rope.number("factor", static_cast<double>(config.max_position_embeddings) /
                                             static_cast<double>(scaling.original_max_position_embeddings));
  if (!(scaling.factor > 0)) rope.fail("factor", "expected a number > 0");
  if (rope.has("attention_factor")) scaling.attention_factor = rope.number("attention_factor");
}

// yarn's keys (transformers' _compute_yarn_parameters): beta_fast / beta_slow fall back to 32 / 1
// when missing or 0 (Python's `or`), truncate to true; original_max_position_embeddings is the
// config's top-level key when there is one (standardize_rope_params gives it priority), else the
// rope dict's, else max_position_embeddings.
void read_yarn_scaling(const Fields& rope, const Fields& top, int64_t max_position_embeddings, RopeScaling& scaling) {
  if (scaling.factor < 1.0) rope.fail("factor", "yarn needs a factor >= 1");
  if (top.has("original_max_position_embeddings")) {
    scaling.original_max_position_embeddings = top.positive_integer("original_max_position_embeddings");
  } else {
    scaling.original_max_position_embeddings =
        rope.has("original_max_position_embeddings") ? rope.positive_integer("original_max_position_embeddings")
                                                     : max_position_embeddings;
  }
  if (rope.has("attention_factor")) scaling.attention_factor = rope.number("attention_factor");
  if (rope.has("mscale")) scaling.mscale = rope.number("mscale");
  if (rope.has("mscale_all_dim")) scaling.mscale_all_dim = rope.number("mscale_all_dim");
  const double beta_fast = rope.number("beta_fast", 0.0);
  const double beta_slow = rope.number("beta_slow", 0.0);
  scaling.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
  scaling.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
  scaling.truncate = rope.boolean("truncate", true);
}

// One rope_parameters / rope_scaling object: its type and scaling factors (theta is read by the
// caller). top: the config's own fields (yarn may read original_max_position_embeddings there).
void read_rope_scaling(const Fields& rope, const std::string& type_key, const Fields& top,
                       int64_t max_position_embeddings, RopeScaling& scaling) {
  static const std::vector<std::string> supported{"default", "linear", "llama3", "yarn", "dynamic"};
  scaling.rope_type = rope.string(type_key, "default");
  if (std::find(supported.begin(), supported.end(), scaling.rope_type) == supported.end())
    rope.fail(type_key, "rope type \"" + scaling.rope_type + "\" is not supported (supported: default, linear, llama3, yarn, dynamic)");
  if (rope.number("partial_rotary_factor", 1.0) != 1.0)
    rope.fail("partial_rotary_factor", "partial rotary embeddings are not supported");
  if (scaling.rope_type == "default") return;
  scaling.factor = rope.number("factor");
  if (scaling.factor <= 0) rope.fail("factor", "expected a number > 0");
  if (scaling.rope_type == "llama3") {
    scaling.low_freq_factor = rope.number("low_freq_factor");
    scaling.high_freq_factor = rope.number("high_freq_factor");
    scaling.original_max_position_embeddings = rope.positive_integer("original_max_position_embeddings");
    if (scaling.high_freq_factor <= scaling.low_freq_factor)
      rope.fail("high_freq_factor", "must be greater than low_freq_factor");
  }
  if (scaling.rope_type == "yarn") read_yarn_scaling(rope, top, max_position_embeddings, scaling);
}

// v5 writes rope_parameters (theta inside); v4 writes rope_theta + rope_scaling (type or rope_type).
void read_rope(const Fields& fields, const std::string& source, ModelConfig& config, double default_theta = 10000.0) {
  if (config.model_type == "phi3") return read_phi3_rope(fields, source, config);
  std::string key;
  if (fields.has("rope_parameters")) key = "rope_parameters";
  else if (fields.has("rope_scaling")) key = "rope_scaling";

  config.rope_theta = fields.number("rope_theta", default_theta);
  if (key.empty()) return;
  if (!fields.at(key).is_object()) fields.fail(key, "expected an object, got " + json_excerpt(fields.at(key)));
  const Fields rope(fields.at(key), source, key + ".");
  config.rope_theta = rope.number("rope_theta", config.rope_theta);
  read_rope_scaling(rope, rope.has("rope_type") ? "rope_type" : "type", fields, config.max_position_embeddings,
                    config.rope_scaling);
}

// Gemma-3: global layers take rope_theta (default 1e6) and rope_scaling; sliding layers their own
// base (default 1e4) without scaling. v5 writes rope_parameters per layer type
// ({"full_attention": {...}, "sliding_attention": {...}}); v4 rope_theta, rope_scaling and
// rope_local_base_freq (Gemma3TextConfig.convert_rope_params_to_dict).
void read_gemma3_rope(const Fields& fields, const std::string& source, ModelConfig& config) {
  constexpr double kGlobalTheta = 1000000.0;
  constexpr double kLocalTheta = 10000.0;
  const bool per_layer_type = fields.has("rope_parameters") && fields.at("rope_parameters").is_object() &&
                              (fields.at("rope_parameters").contains("full_attention") ||
                               fields.at("rope_parameters").contains("sliding_attention"));
  if (!per_layer_type) {
    read_rope(fields, source, config);
    if (!fields.has("rope_parameters") || !fields.at("rope_parameters").contains("rope_theta"))
      config.rope_theta = fields.number("rope_theta", kGlobalTheta);
    config.rope_local_base_freq = fields.number("rope_local_base_freq", kLocalTheta);
    return;
  }
  const Fields parameters(fields.at("rope_parameters"), source, "rope_parameters.");
  config.rope_theta = kGlobalTheta;
  config.rope_local_base_freq = kLocalTheta;
  if (parameters.has("full_attention")) {
    if (!parameters.at("full_attention").is_object()) parameters.fail("full_attention", "expected an object");
    const Fields full(parameters.at("full_attention"), source, "rope_parameters.full_attention.");
    config.rope_theta = full.number("rope_theta", kGlobalTheta);
    read_rope_scaling(full, full.has("rope_type") ? "rope_type" : "type", fields, config.max_position_embeddings,
                      config.rope_scaling);
  }
  if (parameters.has("sliding_attention")) {
    if (!parameters.at("sliding_attention").is_object()) parameters.fail("sliding_attention", "expected an object");
    const Fields sliding(parameters.at("sliding_attention"), source, "rope_parameters.sliding_attention.");
    config.rope_local_base_freq = sliding.number("rope_theta", kLocalTheta);
    const std::string type_key = sliding.has("rope_type") ? "rope_type" : "type";
    if (sliding.string(type_key, "default") != "default")
      sliding.fail(type_key, "only default RoPE is supported for sliding layers");
  }
}

std::vector<int64_t> read_eos(const Fields& fields, const Architecture& architecture) {
  if (!fields.present("eos_token_id")) {
    if (architecture.defaults.eos_token_id) return {*architecture.defaults.eos_token_id};
    return {};
  }
  const json& value = fields.at("eos_token_id");
  if (value.is_null()) return {};
  if (!value.is_array()) return {fields.as_integer("eos_token_id", value)};
  std::vector<int64_t> ids;
  for (const auto& id : value) ids.push_back(fields.as_integer("eos_token_id", id));
  return ids;
}

bool is_gemma(ArchitectureId id) { return id == ArchitectureId::kGemma2 || id == ArchitectureId::kGemma3; }

// Gemma's layer_types ("sliding_attention" / "full_attention" per layer). Absent: Gemma-2
// alternates sliding and full from layer 0; Gemma-3 makes every sliding_window_pattern-th layer
// (default 6) full, the others sliding (their config classes' __post_init__).
std::vector<bool> read_sliding_layers(const Fields& fields, ArchitectureId id, int64_t layers) {
  std::vector<bool> sliding;
  if (!fields.has("layer_types")) {
    const int64_t pattern = id == ArchitectureId::kGemma2 ? 2 : fields.positive_integer("sliding_window_pattern", 6);
    for (int64_t i = 0; i < layers; ++i) sliding.push_back((i + 1) % pattern != 0);
    return sliding;
  }
  const json& types = fields.at("layer_types");
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers)
    fields.fail("layer_types", "expected a list of num_hidden_layers (" + std::to_string(layers) + ") layer types, got " +
                                   json_excerpt(types));
  for (const auto& type : types) {
    if (type != "sliding_attention" && type != "full_attention")
      fields.fail("layer_types", "layer type " + json_excerpt(type) +
                                     " is not supported (sliding_attention, full_attention)");
    sliding.push_back(type == "sliding_attention");
  }
  return sliding;
}

// Mistral's window applies to every layer; Gemma's to its sliding layers. Qwen's per-layer
// sliding windows (use_sliding_window, max_window_layers) are refused.
void read_sliding_window(const Fields& fields, const Architecture& architecture, ModelConfig& config) {
  if (architecture.id == ArchitectureId::kPhi3) {  // Phi3Config: None unless set (Phi-3-mini-4k: 2047)
    config.sliding_window = fields.optional_integer("sliding_window", std::nullopt);
    if (config.sliding_window && *config.sliding_window < 1) fields.fail("sliding_window", "expected an integer >= 1 or null");
    return;
  }
  if (architecture.id == ArchitectureId::kMistral || architecture.id == ArchitectureId::kMixtral) {
    // MixtralConfig: None unless set; every layer attends within it when set, as Mistral's.
    const bool mixtral = architecture.id == ArchitectureId::kMixtral;
    config.sliding_window =
        fields.optional_integer("sliding_window", mixtral ? std::nullopt : std::optional<int64_t>(kMistralDefaultSlidingWindow));
    if (config.sliding_window && *config.sliding_window < 1)
      fields.fail("sliding_window", "expected an integer >= 1 or null");
    return;
  }
  if (is_gemma(architecture.id)) {
    config.sliding_window = fields.positive_integer("sliding_window", kGemmaDefaultSlidingWindow);
    config.sliding_layers = read_sliding_layers(fields, architecture.id, config.num_hidden_layers);
    return;
  }
  if (architecture.id == ArchitectureId::kQwen2 || architecture.id == ArchitectureId::kQwen3 ||
      architecture.id == ArchitectureId::kQwen3Moe) {
    if (fields.boolean("use_sliding_window", false))
      fields.fail("use_sliding_window", "sliding-window attention is not supported");
  }
  if (fields.has("layer_types")) {
    const json& types = fields.at("layer_types");
    if (!types.is_array()) fields.fail("layer_types", "expected a list, got " + json_excerpt(types));
    for (const auto& type : types)
      if (type != "full_attention")
        fields.fail("layer_types", "layer type " + json_excerpt(type) + " is not supported (only full_attention)");
  }
}

// Gemma's own keys: GeGLU activation, attention scale, soft-caps (Gemma-3's attn_logit_softcapping
// is stored by transformers but never applied, so it is not read).
void read_gemma_fields(const Fields& fields, ArchitectureId id, ModelConfig& config) {
  config.hidden_activation = fields.string("hidden_activation", "gelu_pytorch_tanh");
  if (config.hidden_activation != "gelu_pytorch_tanh")
    fields.fail("hidden_activation", "activation \"" + config.hidden_activation +
                                         "\" is not supported (only gelu_pytorch_tanh)");
  if (fields.boolean("use_bidirectional_attention", false))
    fields.fail("use_bidirectional_attention", "bidirectional attention is not supported (finetune trains causal LMs)");
  config.query_pre_attn_scalar = fields.number("query_pre_attn_scalar", 256.0);
  if (!(*config.query_pre_attn_scalar > 0)) fields.fail("query_pre_attn_scalar", "expected a number > 0");
  const auto softcap = [&](const std::string& key, std::optional<double> fallback) -> std::optional<double> {
    if (!fields.present(key)) return fallback;
    if (fields.at(key).is_null()) return std::nullopt;
    const double value = fields.number(key);
    if (!(value > 0)) fields.fail(key, "expected a number > 0 or null");
    return value;
  };
  const bool gemma2 = id == ArchitectureId::kGemma2;
  config.final_logit_softcapping = softcap("final_logit_softcapping", gemma2 ? std::optional<double>(30.0) : std::nullopt);
  if (gemma2) config.attn_logit_softcapping = softcap("attn_logit_softcapping", 50.0);
}

// The config class defaults of the sizes Gemma's config.json may leave out (Gemma2Config,
// Gemma3TextConfig; a Gemma-3 multimodal checkpoint's text_config often lists only a few).
json with_gemma_size_defaults(const json& text, ArchitectureId id) {
  json merged = {{"vocab_size", id == ArchitectureId::kGemma2 ? 256000 : 262208},
                 {"hidden_size", 2304},
                 {"intermediate_size", 9216},
                 {"num_hidden_layers", 26},
                 {"num_attention_heads", 8}};
  for (const auto& [key, value] : text.items()) merged[key] = value;
  return merged;
}

// A list of layer indices, each in [0, layers) (Qwen3MoeConfig's mlp_only_layers).
std::vector<int64_t> read_layer_list(const Fields& fields, const std::string& key, int64_t layers) {
  std::vector<int64_t> indices;
  if (!fields.has(key)) return indices;
  const json& list = fields.at(key);
  if (!list.is_array()) fields.fail(key, "expected a list of layer indices, got " + json_excerpt(list));
  for (const auto& value : list) {
    const int64_t index = fields.as_integer(key, value);
    if (index < 0 || index >= layers)
      fields.fail(key, "layer " + std::to_string(index) + " is not in [0, num_hidden_layers = " + std::to_string(layers) + ")");
    indices.push_back(index);
  }
  return indices;
}

// Note [Config bounds] for the expert counts: at most 1024 experts (released models: 8 to 512),
// top-k within them.
constexpr int64_t kMostExperts = 1024;

// Qwen3MoeConfig / MixtralConfig's routing keys, with their class defaults.
MoeConfig read_moe(const Fields& fields, ArchitectureId id, const ModelConfig& config) {
  const bool mixtral = id == ArchitectureId::kMixtral;
  MoeConfig moe;
  // Qwen3MoeConfig maps num_experts to num_local_experts (attribute_map): save_pretrained writes
  // the latter, the hub's config.json the former.
  const std::string experts_key = !mixtral && fields.has("num_experts") ? "num_experts" : "num_local_experts";
  moe.num_experts = fields.positive_integer(experts_key, mixtral ? 8 : 128);
  if (moe.num_experts > kMostExperts)
    fields.fail(experts_key, std::to_string(moe.num_experts) + " is beyond what finetune builds (at most " +
                                 std::to_string(kMostExperts) + ")");
  moe.num_experts_per_tok = fields.positive_integer("num_experts_per_tok", mixtral ? 2 : 8);
  if (moe.num_experts_per_tok > moe.num_experts)
    fields.fail("num_experts_per_tok", std::to_string(moe.num_experts_per_tok) + " is more than the " +
                                           std::to_string(moe.num_experts) + " experts");
  moe.moe_intermediate_size =
      mixtral ? config.intermediate_size : fields.positive_integer("moe_intermediate_size", 768);
  moe.norm_topk_prob = mixtral || fields.boolean("norm_topk_prob", false);
  moe.routing_weights_in_model_dtype = !mixtral;
  if (!mixtral) {
    moe.decoder_sparse_step = fields.positive_integer("decoder_sparse_step", 1);
    moe.mlp_only_layers = read_layer_list(fields, "mlp_only_layers", config.num_hidden_layers);
  }
  moe.router_aux_loss_coef = fields.number("router_aux_loss_coef", 0.001);
  if (!std::isfinite(moe.router_aux_loss_coef) || moe.router_aux_loss_coef < 0)
    fields.fail("router_aux_loss_coef", "expected a finite number >= 0");
  moe.output_router_logits = fields.boolean("output_router_logits", false);
  // Training-time noise on the router's input draws random numbers finetune does not replay.
  if (mixtral && fields.number("router_jitter_noise", 0.0) != 0.0)
    fields.fail("router_jitter_noise", "router jitter noise is not supported (only 0)");
  return moe;
}

}  // namespace

// quantization_config: only bitsandbytes 4-bit checkpoints (transformers' BitsAndBytesConfig.to_dict()).
static std::optional<Bnb4bitQuantization> read_quantization(const Fields& fields, const std::string& source) {
  if (!fields.has("quantization_config")) return std::nullopt;
  if (!fields.at("quantization_config").is_object())
    fields.fail("quantization_config", "expected an object, got " + json_excerpt(fields.at("quantization_config")));
  const Fields quant(fields.at("quantization_config"), source, "quantization_config.");
  const std::string method = quant.string("quant_method", "");
  if (method != "bitsandbytes")
    quant.fail("quant_method", "\"" + method + "\" is not supported (only bitsandbytes 4-bit checkpoints)");
  if (quant.boolean("load_in_8bit", false))
    quant.fail("load_in_8bit", "8-bit (LLM.int8) checkpoints are not supported (only bitsandbytes 4-bit)");
  if (!quant.boolean("load_in_4bit", false)) quant.fail("load_in_4bit", "expected true (a bitsandbytes 4-bit checkpoint)");
  Bnb4bitQuantization out;
  out.quant_type = quant.string("bnb_4bit_quant_type", "fp4");
  if (out.quant_type != "nf4" && out.quant_type != "fp4")
    quant.fail("bnb_4bit_quant_type", "\"" + out.quant_type + "\" is not supported (nf4, fp4)");
  out.use_double_quant = quant.boolean("bnb_4bit_use_double_quant", false);
  out.compute_dtype = quant.string("bnb_4bit_compute_dtype", "float32");
  const std::string storage = quant.string("bnb_4bit_quant_storage", "uint8");
  if (storage != "uint8") quant.fail("bnb_4bit_quant_storage", "\"" + storage + "\" is not supported (only uint8)");
  if (quant.has("llm_int8_skip_modules")) {
    const auto& skip = quant.at("llm_int8_skip_modules");
    if (!skip.is_array()) quant.fail("llm_int8_skip_modules", "expected a list of names, got " + json_excerpt(skip));
    for (const auto& name : skip) {
      if (!name.is_string()) quant.fail("llm_int8_skip_modules", "expected a list of names, got " + json_excerpt(skip));
      out.skip_modules.push_back(name.get<std::string>());
    }
  }
  return out;
}

// The object holding the text model's keys: config.json itself, or a multimodal checkpoint's
// text_config (Gemma3ForConditionalGeneration), with Gemma's size defaults filled in.
json text_model_json(const json& config_json, const Fields& fields, const Architecture& architecture) {
  json text = config_json;
  if (!architecture.ignored_checkpoint_prefixes.empty()) {  // a multimodal checkpoint's text tower
    text = json::object();
    if (fields.has("text_config")) {
      if (!fields.at("text_config").is_object())
        fields.fail("text_config", "expected an object, got " + json_excerpt(fields.at("text_config")));
      text = fields.at("text_config");
    }
  }
  return is_gemma(architecture.id) ? with_gemma_size_defaults(text, architecture.id) : text;
}

ModelConfig model_config_from_json(const json& config_json, const std::string& source) {
  if (!config_json.is_object()) throw Error(source + ": expected a JSON object");
  const Fields top_fields(config_json, source);
  const Architecture& architecture = architecture_of_fields(top_fields);
  const ArchitectureId id = architecture.id;
  const json text_json = text_model_json(config_json, top_fields, architecture);
  const bool nested = !architecture.ignored_checkpoint_prefixes.empty();
  const Fields fields(text_json, source, nested ? "text_config." : "");

  ModelConfig config;
  config.architecture = architecture.class_names.front();
  config.model_type = architecture.model_type;
  config.vocab_size = fields.positive_integer("vocab_size");
  config.hidden_size = fields.positive_integer("hidden_size");
  config.intermediate_size = fields.positive_integer("intermediate_size");
  config.num_hidden_layers = fields.positive_integer("num_hidden_layers");
  config.num_attention_heads = fields.positive_integer("num_attention_heads");
  config.num_key_value_heads = fields.positive_integer(
      "num_key_value_heads",
      architecture.defaults.num_key_value_heads ? architecture.defaults.num_key_value_heads : config.num_attention_heads);
  if (config.num_attention_heads % config.num_key_value_heads != 0)
    fields.fail("num_key_value_heads", std::to_string(config.num_key_value_heads) + " does not divide num_attention_heads " +
                                           std::to_string(config.num_attention_heads));
  if (fields.has("head_dim")) {
    config.head_dim = fields.positive_integer("head_dim");
  } else if (architecture.defaults.head_dim) {
    config.head_dim = architecture.defaults.head_dim;
  } else {
    if (config.hidden_size % config.num_attention_heads != 0)
      fields.fail("num_attention_heads", std::to_string(config.num_attention_heads) +
                                             " does not divide hidden_size " + std::to_string(config.hidden_size) +
                                             " (and no head_dim is given)");
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }

  if (is_gemma(id)) {
    read_gemma_fields(fields, id, config);
  } else {
    const std::string activation = fields.string("hidden_act", "silu");
    if (activation != "silu") fields.fail("hidden_act", "activation \"" + activation + "\" is not supported (only silu)");
  }
  config.rms_norm_eps = fields.number("rms_norm_eps", architecture.defaults.rms_norm_eps);
  if (config.rms_norm_eps <= 0) fields.fail("rms_norm_eps", "expected a number > 0");
  config.max_position_embeddings =
      fields.positive_integer("max_position_embeddings", architecture.defaults.max_position_embeddings);
  if (id == ArchitectureId::kGemma3) {
    read_gemma3_rope(fields, source, config);
  } else {
    read_rope(fields, source, config, architecture.defaults.rope_theta);
  }
  // Gemma ties by default (its config classes); a multimodal checkpoint may say it at the top.
  const bool tie_default = is_gemma(id) && top_fields.boolean("tie_word_embeddings", true);
  config.tie_word_embeddings = fields.boolean("tie_word_embeddings", tie_default);

  // Which projections carry a bias, as each modeling_*.py builds its layers.
  if (id == ArchitectureId::kLlama || id == ArchitectureId::kQwen3 || id == ArchitectureId::kQwen3Moe || is_gemma(id)) {
    config.attention_bias = config.attention_output_bias = fields.boolean("attention_bias", false);
  } else if (id == ArchitectureId::kQwen2) {
    config.attention_bias = true;  // q/k/v always biased, o_proj never
    config.attention_output_bias = false;
  }
  config.mlp_bias = id == ArchitectureId::kLlama && fields.boolean("mlp_bias", false);
  config.qk_norm = has_role(architecture, ModuleRole::kQueryNorm);

  const std::string dtype_key = top_fields.has("dtype") ? "dtype" : "torch_dtype";
  config.torch_dtype = top_fields.string(dtype_key, "float32");
  if (config.torch_dtype != "float32" && config.torch_dtype != "float16" && config.torch_dtype != "bfloat16")
    top_fields.fail(dtype_key, "dtype \"" + config.torch_dtype + "\" is not supported (float32, float16, bfloat16)");

  config.bos_token_id = fields.optional_integer("bos_token_id", architecture.defaults.bos_token_id);
  config.eos_token_ids = read_eos(fields, architecture);
  config.pad_token_id = fields.optional_integer("pad_token_id", is_gemma(id) ? std::optional<int64_t>(0) : std::nullopt);
  read_sliding_window(fields, architecture, config);
  if (architecture.moe) config.moe = read_moe(fields, id, config);
  config.quantization = read_quantization(top_fields, source);
  config.raw = config_json;
  validate_model_config_bounds(config, source);
  return config;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  return model_config_from_json(read_json_file(path, "is " + model_dir + " a Hugging Face model directory?"), path);
}

bool layer_is_sparse(const ModelConfig& config, int64_t layer) {
  if (!config.moe) return false;
  for (int64_t dense : config.moe->mlp_only_layers)
    if (dense == layer) return false;
  return (layer + 1) % config.moe->decoder_sparse_step == 0;
}

bool layer_is_sliding(const ModelConfig& config, int64_t layer) {
  if (!config.sliding_window) return false;
  if (config.sliding_layers.empty()) return true;
  return config.sliding_layers.at(static_cast<size_t>(layer));
}

// Note [Config bounds]
// The sizes in config.json decide what is allocated before any weight is read; a hostile or
// mistyped value (num_hidden_layers 1e9, vocab_size 2^40) would end in std::bad_alloc or
// LibTorch's bare allocation message. Each is bounded by what any released model uses, with
// room to spare, and the total parameter count by 2^40 (a trillion): past that, an error naming
// the file and the field.
void validate_model_config_bounds(const ModelConfig& config, const std::string& source) {
  const auto bound = [&](const char* field, int64_t value, int64_t most) {
    if (value > most) {
      throw Error(source + ": field \"" + field + "\": " + std::to_string(value) +
                  " is beyond what finetune builds (at most " + std::to_string(most) + ")");
    }
  };
  bound("vocab_size", config.vocab_size, int64_t{1} << 24);
  bound("hidden_size", config.hidden_size, int64_t{1} << 16);
  bound("intermediate_size", config.intermediate_size, int64_t{1} << 20);
  bound("num_hidden_layers", config.num_hidden_layers, 1024);
  bound("num_attention_heads", config.num_attention_heads, 1024);
  bound("num_key_value_heads", config.num_key_value_heads, 1024);
  bound("head_dim", config.head_dim, 4096);
  bound("max_position_embeddings", config.max_position_embeddings, int64_t{1} << 24);
  double mlp = 3.0 * config.hidden_size * static_cast<double>(config.intermediate_size);
  if (config.moe) {
    bound("moe_intermediate_size", config.moe->moe_intermediate_size, int64_t{1} << 20);
    mlp = std::max(mlp, static_cast<double>(config.moe->num_experts) *
                            (3.0 * config.hidden_size * static_cast<double>(config.moe->moe_intermediate_size) +
                             config.hidden_size));
  }
  const double layer = 2.0 * config.hidden_size * config.head_dim *
                           static_cast<double>(config.num_attention_heads + config.num_key_value_heads) +
                       mlp;
  const double parameters = static_cast<double>(config.num_hidden_layers) * layer +
                            2.0 * static_cast<double>(config.vocab_size) * static_cast<double>(config.hidden_size);
  if (parameters > std::ldexp(1.0, 40)) {
    throw Error(source + ": its sizes (vocab_size, hidden_size, intermediate_size, num_hidden_layers, heads) make " +
                "about " + std::to_string(static_cast<int64_t>(parameters / 1e9)) +
                " billion parameters, beyond what finetune builds (at most 2^40)");
  }
  if (!(config.rope_theta > 0) || !std::isfinite(config.rope_theta)) {
    std::ostringstream theta;
    theta << config.rope_theta;
    throw Error(source + ": field \"rope_theta\": " + theta.str() + " is not a positive finite number (RoPE divides by "
                "powers of it)");
  }
}

}  // namespace finetune
