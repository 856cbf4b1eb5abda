#include "finetune/tokenizer/bpe_tokenizer.h"

#include <set>

#include "finetune/tokenizer/decode_text.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_fields.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

constexpr const char* kMetaspace = "\xE2\x96\x81";  // "▁"

std::string type_of(const nlohmann::json& node, const std::string& path, const std::string& where) {
  if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) {
    throw Error(path + ": field '" + where + ".type' is missing or not a string");
  }
  return node["type"].get<std::string>();
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path, const TokenizerConfig& config)
    : BpeTokenizer(path, read_json_file(path), config) {}

BpeTokenizer::BpeTokenizer(const std::string& path, const nlohmann::json& json, const TokenizerConfig& config,
                           TokenizerPipeline pipeline)
    : path_(path), clean_up_tokenization_spaces_(config.clean_up_tokenization_spaces) {
  if (!json.is_object()) throw Error(path + ": top level must be a JSON object");
  const nlohmann::json* model = json_field(json, "model", path, "<root>");
  if (!model) throw Error(path + ": field 'model' is missing");
  parse_model(*model, config, pipeline);
  // A tokenizer class that rebuilds the pipeline takes its added tokens from tokenizer_config.json
  // and the named special tokens, not from tokenizer.json's added_tokens.
  if (pipeline == TokenizerPipeline::kFile) add_file_added_tokens(json);
  add_config_added_tokens(config, pipeline != TokenizerPipeline::kFile);
  std::set<int32_t> ids;
  for (const auto& entry : id_to_token_) ids.insert(entry.first);
  for (const AddedToken& token : added_.tokens()) ids.insert(token.id);
  vocab_size_ = static_cast<int64_t>(ids.size());
  max_token_id_ = ids.empty() ? -1 : *ids.rbegin();
  parse_pipeline(json, config, pipeline);
  // transformers 5 drops add_bos_token / add_eos_token from tokenizer_config.json when a
  // tokenizer.json exists: its post-processor alone decides (none = nothing added).
  if (const auto* post = json_field(json, "post_processor", path, "<root>")) parse_post_processor(*post, "post_processor");
  special_ = resolve_special_tokens(config, *this, path);
}

void BpeTokenizer::parse_model(const nlohmann::json& node, const TokenizerConfig& config, TokenizerPipeline pipeline) {
  const std::string& path = path_;
  const nlohmann::json* model = &node;
  const std::string model_type = model->contains("type") ? type_of(*model, path, "model") : "BPE";
  if (model_type != "BPE") throw Error(path + ": field 'model.type' is '" + model_type + "'; only BPE is supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto* v = json_field(*model, key, path, "model");
    if (v && !(v->is_string() && v->get<std::string>().empty())) {
      throw Error(path + ": field 'model." + key + "' is set; it is not supported");
    }
  }
  if (const auto* dropout = json_field(*model, "dropout", path, "model")) {
    if (!dropout->is_number()) throw Error(path + ": field 'model.dropout' must be a number or null");
    if (dropout->get<double>() > 0) throw Error(path + ": field 'model.dropout' is set; BPE dropout is not supported");
  }
  const nlohmann::json* vocab_json = json_field(*model, "vocab", path, "model");
  if (!vocab_json || !vocab_json->is_object()) throw Error(path + ": field 'model.vocab' must be an object");
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(vocab_json->size());
  for (const auto& [token, id] : vocab_json->items()) {
    const int32_t value = json_token_id(id, path, "model.vocab." + token);
    vocab.emplace(token, value);
    id_to_token_[value] = token;
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (const auto* merges_json = json_field(*model, "merges", path, "model")) {
    if (!merges_json->is_array()) throw Error(path + ": field 'model.merges' must be an array");
    merges.reserve(merges_json->size());
    for (size_t i = 0; i < merges_json->size(); ++i) {
      const auto& m = (*merges_json)[i];
      if (m.is_string()) {  // "left right"
        const std::string text = m.get<std::string>();
        const size_t space = text.find(' ', 1);
        if (space == std::string::npos) {
          throw Error(path + ": field 'model.merges[" + std::to_string(i) + "]' has no space: '" + text + "'");
        }
        merges.emplace_back(text.substr(0, space), text.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        throw Error(path + ": field 'model.merges[" + std::to_string(i) + "]' must be \"a b\" or [\"a\", \"b\"]");
      }
    }
  }
  BpeOptions options;
  if (pipeline == TokenizerPipeline::kFile) {
    options.ignore_merges = json_bool(*model, "ignore_merges", false, path, "model");
    options.byte_fallback = json_bool(*model, "byte_fallback", false, path, "model");
    options.fuse_unk = json_bool(*model, "fuse_unk", false, path, "model");
    if (const auto* unk = json_field(*model, "unk_token", path, "model")) {
      if (!unk->is_string()) throw Error(path + ": field 'model.unk_token' must be a string or null");
      options.unk_token = unk->get<std::string>();
    }
  } else {  // LlamaTokenizer / GemmaTokenizer: BPE(fuse_unk=True, byte_fallback=True[, unk_token])
    options.byte_fallback = true;
    options.fuse_unk = true;
    if (pipeline == TokenizerPipeline::kGemma) options.unk_token = config.unk_token.value_or("<unk>");
  }
  try {
    model_ = std::make_unique<BpeModel>(std::move(vocab), merges, options);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void BpeTokenizer::add_file_added_tokens(const nlohmann::json& json) {
  const auto* added = json_field(json, "added_tokens", path_, "<root>");
  if (!added) return;
  if (!added->is_array()) throw Error(path_ + ": field 'added_tokens' must be an array");
  for (size_t i = 0; i < added->size(); ++i) {
    const auto& entry = (*added)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const nlohmann::json* id = json_field(entry, "id", path_, where);
    if (!id) throw Error(path_ + ": field '" + where + ".id' is missing");
    const int32_t token_id = json_token_id(*id, path_, where + ".id");
    try {
      added_.add(added_token_from_json(entry, token_id));
    } catch (const std::exception& e) {
      throw Error(path_ + ": field '" + where + "' is malformed: " + e.what());
    }
  }
}

void BpeTokenizer::add_config_added_tokens(const TokenizerConfig& config, bool named_special_tokens) {
  for (const auto& token : config.added_tokens_decoder) {
    if (!added_.find_by_content(token.content)) added_.add(token);
  }
  if (!named_special_tokens) return;
  // transformers adds the named special tokens it does not know yet, as special, unnormalized.
  for (const auto* name : {&config.bos_token, &config.eos_token, &config.unk_token, &config.pad_token}) {
    if (!*name || added_.find_by_content(**name)) continue;
    const auto it = model_->vocab().find(**name);
    if (it == model_->vocab().end()) continue;  // resolve_special_tokens names the missing token
    AddedToken token;
    token.content = **name;
    token.id = it->second;
    token.special = true;
    added_.add(token);
  }
}

void BpeTokenizer::parse_pipeline(const nlohmann::json& json, const TokenizerConfig& config, TokenizerPipeline pipeline) {
  if (pipeline == TokenizerPipeline::kLlama) {
    const bool add_prefix_space = config.add_prefix_space.value_or(true);
    pre_tokenizer_ = PreTokenizer::metaspace(!add_prefix_space ? PrependScheme::kNever
                                             : config.legacy   ? PrependScheme::kAlways
                                                               : PrependScheme::kFirst);
    decoder_ = TokenDecoder::llama(add_prefix_space);
    return;
  }
  if (pipeline == TokenizerPipeline::kGemma) {
    normalizer_ = Normalizer::replace(" ", kMetaspace);
    pre_tokenizer_ = PreTokenizer::gemma();
    decoder_ = TokenDecoder::gemma();
    return;
  }
  if (const auto* n = json_field(json, "normalizer", path_, "<root>")) normalizer_ = Normalizer::from_json(*n, path_, "normalizer");
  if (const auto* p = json_field(json, "pre_tokenizer", path_, "<root>")) {
    pre_tokenizer_ = PreTokenizer::from_json(*p, path_, "pre_tokenizer");
  }
  if (const auto* d = json_field(json, "decoder", path_, "<root>")) decoder_ = TokenDecoder::from_json(*d, path_, "decoder");
}

void BpeTokenizer::parse_post_processor(const nlohmann::json& node, const std::string& where) {
  const std::string type = type_of(node, path_, where);
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    const auto* list = json_field(node, "processors", path_, where);
    if (!list || !list->is_array()) throw Error(path_ + ": field '" + where + ".processors' must be an array");
    for (size_t i = 0; i < list->size(); ++i) parse_post_processor((*list)[i], where + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type != "TemplateProcessing") {
    throw Error(path_ + ": field '" + where + ".type' is '" + type +
                "'; supported post-processors: TemplateProcessing, ByteLevel, Sequence");
  }
  const auto* single = json_field(node, "single", path_, where);
  const auto* specials = json_field(node, "special_tokens", path_, where);
  if (!single || !single->is_array()) throw Error(path_ + ": field '" + where + ".single' must be an array");
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const nlohmann::json& piece = (*single)[i];
    const std::string piece_where = where + ".single[" + std::to_string(i) + "]";
    if (json_field(piece, "Sequence", path_, piece_where)) {
      seen_sequence = true;
      continue;
    }
    const nlohmann::json* special = json_field(piece, "SpecialToken", path_, piece_where);
    if (!special) throw Error(path_ + ": field '" + piece_where + "' is neither a Sequence nor a SpecialToken");
    const std::string name = json_string(*special, "id", "", path_, piece_where + ".SpecialToken");
    const nlohmann::json* entry = specials ? json_field(*specials, name, path_, where + ".special_tokens") : nullptr;
    const nlohmann::json* ids = entry ? json_field(*entry, "ids", path_, where + ".special_tokens." + name) : nullptr;
    if (!ids || !ids->is_array()) {
      throw Error(path_ + ": field '" + where + ".special_tokens' lacks '" + name + "' with a list of ids");
    }
    for (const auto& id : *ids) {
      (seen_sequence ? suffix_ids_ : prefix_ids_).push_back(json_token_id(id, path_, where + ".special_tokens." + name + ".ids"));
    }
  }
}

void BpeTokenizer::encode_plain(const std::string& normalized, bool at_text_start, std::vector<int32_t>& out) const {
  for (const auto& word : pre_tokenizer_.split(normalized, at_text_start)) model_->encode_word(word, out);
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  const bool second_pass = added_.has_normalized_tokens();
  bool at_text_start = true;  // the next piece begins at offset 0 of `text`
  for (const auto& segment : added_.split(text, /*normalized=*/false)) {
    if (segment.added_id >= 0) {
      ids.push_back(segment.added_id);
    } else if (!segment.text.empty()) {
      // The normalizer sees the whole text between added tokens; tokens flagged `normalized` are
      // then matched in the normalized text.
      const std::string normalized = normalizer_.apply(segment.text);
      if (!second_pass) {
        encode_plain(normalized, at_text_start, ids);
      } else {
        bool first_inner = true;
        for (const auto& inner : added_.split(normalized, /*normalized=*/true)) {
          if (inner.added_id >= 0) {
            ids.push_back(inner.added_id);
          } else if (!inner.text.empty()) {
            encode_plain(inner.text, at_text_start && first_inner, ids);
          }
          first_inner = false;
        }
      }
    }
    at_text_start = false;
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* added = added_.find_by_id(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const auto it = id_to_token_.find(id); it != id_to_token_.end()) {
      tokens.push_back(it->second);
    } else {
      throw Error(path_ + ": cannot decode token id " + std::to_string(id) + ": not in the vocabulary");
    }
  }
  const std::string text = decoder_.decode(std::move(tokens));
  return clean_up_tokenization_spaces_ ? clean_up_tokenization(text) : text;
}

std::optional<int32_t> BpeTokenizer::token_to_id(const std::string& token) const {
  if (const AddedToken* added = added_.find_by_content(token)) return added->id;
  auto it = model_->vocab().find(token);
  if (it == model_->vocab().end()) return std::nullopt;
  return it->second;
}

int64_t BpeTokenizer::vocab_size() const { return vocab_size_; }

}  // namespace finetune
