#include "finetune/tokenizer/bpe_tokenizer.h"

#include <set>

#include "finetune/tokenizer/decode_text.h"
#include "finetune/tokenizer/unicode_nfc.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_fields.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

// GPT-2's pre-tokenization regex, used by ByteLevel(use_regex=true).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const nlohmann::json& node, const std::string& path, const std::string& where) {
  if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) {
    throw Error(path + ": field '" + where + ".type' is missing or not a string");
  }
  return node["type"].get<std::string>();
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path, const TokenizerConfig& config)
    : BpeTokenizer(path, read_json_file(path), config) {}

BpeTokenizer::BpeTokenizer(const std::string& path, const nlohmann::json& json, const TokenizerConfig& config)
    : path_(path), clean_up_tokenization_spaces_(config.clean_up_tokenization_spaces) {
  if (!json.is_object()) throw Error(path + ": top level must be a JSON object");

  // model
  const nlohmann::json* model = json_field(json, "model", path, "<root>");
  if (!model) throw Error(path + ": field 'model' is missing");
  const std::string model_type = model->contains("type") ? type_of(*model, path, "model") : "BPE";
  if (model_type != "BPE") {
    throw Error(path + ": field 'model.type' is '" + model_type + "'; only byte-level BPE is supported");
  }
  if (json_bool(*model, "byte_fallback", false, path, "model")) {
    throw Error(path + ": field 'model.byte_fallback' is true; only byte-level BPE (byte_fallback false) is supported");
  }
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
  try {
    model_ = std::make_unique<BpeModel>(std::move(vocab), merges, json_bool(*model, "ignore_merges", false, path, "model"));
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }

  // added_tokens, then those transformers adds from tokenizer_config.json
  std::set<int32_t> ids;
  for (const auto& entry : id_to_token_) ids.insert(entry.first);
  if (const auto* added = json_field(json, "added_tokens", path, "<root>")) {
    if (!added->is_array()) throw Error(path + ": field 'added_tokens' must be an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const auto& entry = (*added)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      const nlohmann::json* id = json_field(entry, "id", path, where);
      if (!id) throw Error(path + ": field '" + where + ".id' is missing");
      const int32_t token_id = json_token_id(*id, path, where + ".id");
      AddedToken token;
      try {
        token = added_token_from_json(entry, token_id);
      } catch (const std::exception& e) {
        throw Error(path + ": field '" + where + "' is malformed: " + e.what());
      }
      added_.add(token);
      ids.insert(token.id);
    }
  }
  for (const auto& token : config.added_tokens_decoder) {
    if (!added_.find_by_content(token.content)) {
      added_.add(token);
      ids.insert(token.id);
    }
  }
  vocab_size_ = static_cast<int64_t>(ids.size());
  max_token_id_ = ids.empty() ? -1 : *ids.rbegin();

  if (const auto* n = json_field(json, "normalizer", path, "<root>")) parse_normalizer(*n, "normalizer");
  if (const auto* p = json_field(json, "pre_tokenizer", path, "<root>")) parse_pre_tokenizer(*p, "pre_tokenizer");
  if (const auto* d = json_field(json, "decoder", path, "<root>")) parse_decoder(*d, "decoder");

  // transformers 5 drops add_bos_token / add_eos_token from tokenizer_config.json when a
  // tokenizer.json exists: its post-processor alone decides (none = nothing added).
  if (const auto* post = json_field(json, "post_processor", path, "<root>")) parse_post_processor(*post, "post_processor");
  special_ = resolve_special_tokens(config, *this, path);
}

void BpeTokenizer::parse_normalizer(const nlohmann::json& node, const std::string& where) {
  const std::string type = type_of(node, path_, where);
  if (type == "NFC") {
    nfc_ = true;
  } else if (type == "Sequence") {
    const auto* list = json_field(node, "normalizers", path_, where);
    if (!list || !list->is_array()) throw Error(path_ + ": field '" + where + ".normalizers' must be an array");
    for (size_t i = 0; i < list->size(); ++i) parse_normalizer((*list)[i], where + ".normalizers[" + std::to_string(i) + "]");
  } else {
    throw Error(path_ + ": field '" + where + ".type' is '" + type + "'; supported normalizers: null, NFC");
  }
}

void BpeTokenizer::parse_pre_tokenizer(const nlohmann::json& node, const std::string& where) {
  const std::string type = type_of(node, path_, where);
  if (type == "Sequence") {
    const auto* list = json_field(node, "pretokenizers", path_, where);
    if (!list || !list->is_array()) throw Error(path_ + ": field '" + where + ".pretokenizers' must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
      parse_pre_tokenizer((*list)[i], where + ".pretokenizers[" + std::to_string(i) + "]");
    }
  } else if (type == "Split") {
    const auto* pattern = json_field(node, "pattern", path_, where);
    std::string text;
    bool literal = false;
    if (pattern && pattern->is_object() && pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
      text = (*pattern)["Regex"].get<std::string>();
    } else if (pattern && pattern->is_object() && pattern->contains("String") && (*pattern)["String"].is_string()) {
      text = (*pattern)["String"].get<std::string>();
      literal = true;
    } else {
      throw Error(path_ + ": field '" + where + ".pattern' must be {\"Regex\": ...} or {\"String\": ...}");
    }
    if (json_bool(node, "invert", false, path_, where)) {
      throw Error(path_ + ": field '" + where + ".invert' = true is not supported");
    }
    const std::string behavior = json_string(node, "behavior", "Isolated", path_, where);
    PreTokenizerStep step;
    if (behavior == "Isolated") {
      step.kind = PreTokenizerStep::Kind::kSplitIsolated;
    } else if (behavior == "Removed") {
      step.kind = PreTokenizerStep::Kind::kSplitRemoved;
    } else {
      throw Error(path_ + ": field '" + where + ".behavior' is '" + behavior + "'; supported: Isolated, Removed");
    }
    try {
      step.regex = std::make_shared<RegexSplitter>(text, literal);
    } catch (const Error& e) {
      throw Error(path_ + ": field '" + where + ".pattern': " + e.what());
    }
    pre_tokenizer_.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = json_bool(node, "add_prefix_space", false, path_, where);
    if (json_bool(node, "use_regex", true, path_, where)) step.regex = std::make_shared<RegexSplitter>(kGpt2Pattern, false);
    pre_tokenizer_.push_back(std::move(step));
  } else {
    throw Error(path_ + ": field '" + where + ".type' is '" + type +
                "'; supported pre-tokenizers: Sequence, Split, ByteLevel");
  }
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

void BpeTokenizer::parse_decoder(const nlohmann::json& node, const std::string& where) {
  const std::string type = type_of(node, path_, where);
  if (type != "ByteLevel") {
    throw Error(path_ + ": field '" + where + ".type' is '" + type + "'; supported decoders: null, ByteLevel");
  }
  byte_level_decoder_ = true;
}

void BpeTokenizer::encode_plain(const std::string& text, std::vector<int32_t>& out) const {
  std::vector<std::string> pieces{nfc_ ? nfc_normalize(text) : text};
  for (const auto& step : pre_tokenizer_) {
    std::vector<std::string> next;
    for (auto& piece : pieces) {
      if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
        if (step.add_prefix_space && piece.rfind(' ', 0) != 0) piece.insert(0, " ");
        if (!step.regex) {
          next.push_back(byte_level_.encode(piece));
        } else {
          for (const auto& part : step.regex->split_isolated(piece)) next.push_back(byte_level_.encode(part));
        }
      } else {
        auto parts = step.kind == PreTokenizerStep::Kind::kSplitIsolated ? step.regex->split_isolated(piece)
                                                                         : step.regex->split_removed(piece);
        for (auto& part : parts) next.push_back(std::move(part));
      }
    }
    pieces = std::move(next);
  }
  for (const auto& piece : pieces) model_->encode_word(piece, out);
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  const bool second_pass = added_.has_normalized_tokens();
  for (const auto& segment : added_.split(text, /*normalized=*/false)) {
    if (segment.added_id >= 0) {
      ids.push_back(segment.added_id);
      continue;
    }
    if (!second_pass) {
      encode_plain(segment.text, ids);
      continue;
    }
    // Tokens flagged `normalized` are matched in the normalized text.
    const std::string normalized = nfc_ ? nfc_normalize(segment.text) : segment.text;
    for (const auto& inner : added_.split(normalized, /*normalized=*/true)) {
      if (inner.added_id >= 0) {
        ids.push_back(inner.added_id);
      } else {
        encode_plain(inner.text, ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string text;
  bool first = true;
  for (int32_t id : ids) {
    std::string token;
    if (const AddedToken* added = added_.find_by_id(id)) {
      if (skip_special_tokens && added->special) continue;
      token = added->content;
    } else if (const auto it = id_to_token_.find(id); it != id_to_token_.end()) {
      token = it->second;
    } else {
      throw Error(path_ + ": cannot decode token id " + std::to_string(id) + ": not in the vocabulary");
    }
    if (byte_level_decoder_) {
      text += byte_level_.decode_token(token);
    } else {
      if (!first) text += ' ';
      text += token;
    }
    first = false;
  }
  if (byte_level_decoder_) text = utf8_lossy(text);
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
