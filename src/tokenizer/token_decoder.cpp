#include "finetune/tokenizer/token_decoder.h"

#include "finetune/tokenizer/decode_text.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_fields.h"
#include "finetune/util/utf8.h"

namespace finetune {
namespace {

constexpr const char* kMetaspace = "\xE2\x96\x81";  // "▁"

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
}

// The UTF-8 characters of `token`, one string each.
std::vector<std::string> characters(const std::string& token) {
  std::vector<std::string> chars;
  for (size_t i = 0; i < token.size();) {
    size_t len = utf8_sequence_length(static_cast<unsigned char>(token[i]));
    if (i + len > token.size()) len = token.size() - i;
    chars.push_back(token.substr(i, len));
    i += len;
  }
  return chars;
}

std::string strip_token(const std::string& token, const std::string& content, size_t start, size_t stop) {
  const std::vector<std::string> chars = characters(token);
  size_t begin = 0, end = chars.size();
  while (begin < start && begin < end && chars[begin] == content) ++begin;
  for (size_t cut = 0; cut < stop && end > begin && chars[end - 1] == content; ++cut) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += chars[i];
  return out;
}

// ByteFallback: consecutive byte tokens become one token holding their bytes.
std::vector<std::string> fuse_byte_tokens(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string pending;
  size_t pending_count = 0;
  auto flush = [&] {
    if (pending_count == 0) return;
    if (utf8_lossy(pending) == pending) {
      out.push_back(pending);
    } else {
      std::string replacement;
      for (size_t i = 0; i < pending_count; ++i) replacement += "\xEF\xBF\xBD";
      out.push_back(replacement);
    }
    pending.clear();
    pending_count = 0;
  };
  for (const std::string& token : tokens) {
    const int byte = byte_fallback_value(token);
    if (byte >= 0) {
      pending.push_back(static_cast<char>(byte));
      ++pending_count;
      continue;
    }
    flush();
    out.push_back(token);
  }
  flush();
  return out;
}

}  // namespace

int byte_fallback_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = (c >= '0' && c <= '9')   ? c - '0'
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                               : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

TokenDecoder TokenDecoder::from_json(const nlohmann::json& node, const std::string& path, const std::string& where) {
  TokenDecoder decoder;
  decoder.present_ = true;
  decoder.append_from_json(node, path, where);
  return decoder;
}

TokenDecoder TokenDecoder::llama(bool add_prefix_space) {
  TokenDecoder decoder = gemma();
  if (add_prefix_space) decoder.steps_.push_back({Step::Kind::kStrip, " ", "", 1, 0, true});
  return decoder;
}

TokenDecoder TokenDecoder::gemma() {
  TokenDecoder decoder;
  decoder.present_ = true;
  decoder.steps_.push_back({Step::Kind::kReplace, kMetaspace, " ", 0, 0, true});
  decoder.steps_.push_back({Step::Kind::kByteFallback, "", "", 0, 0, true});
  decoder.steps_.push_back({Step::Kind::kFuse, "", "", 0, 0, true});
  return decoder;
}

void TokenDecoder::append_from_json(const nlohmann::json& node, const std::string& path, const std::string& where) {
  const std::string type = json_string(node, "type", "", path, where);
  Step step{};
  if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    if (!byte_level_) byte_level_ = std::make_shared<const ByteLevelMap>();
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    const nlohmann::json* pattern = json_field(node, "pattern", path, where);
    if (!pattern || !pattern->is_object() || !pattern->contains("String") || !(*pattern)["String"].is_string()) {
      throw Error(path + ": field '" + where + ".pattern' must be {\"String\": ...}; Regex patterns are not supported here");
    }
    step.pattern = (*pattern)["String"].get<std::string>();
    step.content = json_string(node, "content", "", path, where);
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    step.pattern = json_string(node, "content", " ", path, where);
    const nlohmann::json* start = json_field(node, "start", path, where);
    const nlohmann::json* stop = json_field(node, "stop", path, where);
    if ((start && !start->is_number_unsigned()) || (stop && !stop->is_number_unsigned())) {
      throw Error(path + ": fields '" + where + ".start' / '" + where + ".stop' must be non-negative integers");
    }
    step.start = start ? start->get<size_t>() : 0;
    step.stop = stop ? stop->get<size_t>() : 0;
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    step.pattern = json_string(node, "replacement", kMetaspace, path, where);
    step.prepend = json_string(node, "prepend_scheme", "always", path, where) != "never";
  } else if (type == "Sequence") {
    const auto* list = json_field(node, "decoders", path, where);
    if (!list || !list->is_array()) throw Error(path + ": field '" + where + ".decoders' must be an array");
    for (size_t i = 0; i < list->size(); ++i) append_from_json((*list)[i], path, where + ".decoders[" + std::to_string(i) + "]");
    return;
  } else {
    throw Error(path + ": field '" + where + ".type' is '" + type +
                "'; supported decoders: null, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
  }
  steps_.push_back(step);
}

void TokenDecoder::apply(const Step& step, std::vector<std::string>& tokens) const {
  switch (step.kind) {
    case Step::Kind::kByteLevel: {
      std::string bytes;
      for (const auto& token : tokens) bytes += byte_level_->decode_token(token);
      tokens = {utf8_lossy(bytes)};
      break;
    }
    case Step::Kind::kReplace:
      for (auto& token : tokens) replace_all(token, step.pattern, step.content);
      break;
    case Step::Kind::kByteFallback:
      tokens = fuse_byte_tokens(tokens);
      break;
    case Step::Kind::kFuse: {
      std::string fused;
      for (const auto& token : tokens) fused += token;
      tokens = {fused};
      break;
    }
    case Step::Kind::kStrip:
      for (auto& token : tokens) token = strip_token(token, step.pattern, step.start, step.stop);
      break;
    case Step::Kind::kMetaspace:
      for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], step.pattern, i == 0 && step.prepend ? "" : " ");
      break;
  }
}

std::string TokenDecoder::decode(std::vector<std::string> tokens) const {
  std::string text;
  if (!present_) {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return text;
  }
  for (const Step& step : steps_) apply(step, tokens);
  for (const auto& token : tokens) text += token;
  return text;
}

}  // namespace finetune
