#include "finetune/tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "finetune/util/errors.h"
#include "finetune/util/json_fields.h"

namespace finetune {
namespace {

constexpr const char* kMetaspace = "\xE2\x96\x81";  // "▁"

// GPT-2's pre-tokenization regex, used by ByteLevel(use_regex=true).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Pieces of `text` cut by `regex`, each with its byte offset, per the Split behaviors of tokenizers'
// NormalizedString::split. MergedWithPrevious: a match joins the piece before it unless that piece
// was itself a match; MergedWithNext: mirrored.
std::vector<std::pair<size_t, std::string>> split_merged(const RegexSplitter& regex, const std::string& text,
                                                         bool with_previous) {
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t last = 0;
  for (const auto& [begin, end] : regex.find_matches(text)) {
    if (begin > last) spans.push_back({last, begin, false});
    spans.push_back({begin, end, true});
    last = end;
  }
  if (last < text.size()) spans.push_back({last, text.size(), false});
  std::vector<Span> merged;
  bool previous_match = false;
  if (with_previous) {
    for (const Span& span : spans) {
      if (span.is_match && !previous_match && !merged.empty()) {
        merged.back().end = span.end;
      } else {
        merged.push_back(span);
      }
      previous_match = span.is_match;
    }
  } else {
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      if (it->is_match && !previous_match && !merged.empty()) {
        merged.back().begin = it->begin;
      } else {
        merged.push_back(*it);
      }
      previous_match = it->is_match;
    }
    std::reverse(merged.begin(), merged.end());
  }
  std::vector<std::pair<size_t, std::string>> pieces;
  for (const Span& span : merged) pieces.emplace_back(span.begin, text.substr(span.begin, span.end - span.begin));
  return pieces;
}

std::vector<std::pair<size_t, std::string>> split_with_offsets(const RegexSplitter& regex, const std::string& text,
                                                               bool keep_matches) {
  std::vector<std::pair<size_t, std::string>> pieces;
  size_t last = 0;
  for (const auto& [begin, end] : regex.find_matches(text)) {
    if (begin > last) pieces.emplace_back(last, text.substr(last, begin - last));
    if (keep_matches) pieces.emplace_back(begin, text.substr(begin, end - begin));
    last = end;
  }
  if (last < text.size()) pieces.emplace_back(last, text.substr(last));
  return pieces;
}

PrependScheme prepend_scheme_from(const std::string& text, const std::string& path, const std::string& where) {
  if (text == "first") return PrependScheme::kFirst;
  if (text == "always") return PrependScheme::kAlways;
  if (text == "never") return PrependScheme::kNever;
  throw Error(path + ": field '" + where + ".prepend_scheme' is '" + text + "'; expected first, always or never");
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& node, const std::string& path, const std::string& where) {
  PreTokenizer pre_tokenizer;
  pre_tokenizer.append_from_json(node, path, where);
  return pre_tokenizer;
}

PreTokenizer PreTokenizer::metaspace(PrependScheme scheme) {
  PreTokenizer pre_tokenizer;
  Step step;
  step.kind = Step::Kind::kMetaspace;
  step.replacement = kMetaspace;
  step.scheme = scheme;
  step.split = false;
  pre_tokenizer.steps_.push_back(step);
  return pre_tokenizer;
}

PreTokenizer PreTokenizer::gemma() {
  PreTokenizer pre_tokenizer;
  Step step;
  step.kind = Step::Kind::kSplitMergedWithPrevious;
  step.regex = std::make_shared<RegexSplitter>(" ", /*literal=*/true);
  pre_tokenizer.steps_.push_back(step);
  return pre_tokenizer;
}

void PreTokenizer::append_from_json(const nlohmann::json& node, const std::string& path, const std::string& where) {
  const std::string type = json_string(node, "type", "", path, where);
  if (type == "Sequence") {
    const auto* list = json_field(node, "pretokenizers", path, where);
    if (!list || !list->is_array()) throw Error(path + ": field '" + where + ".pretokenizers' must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
      append_from_json((*list)[i], path, where + ".pretokenizers[" + std::to_string(i) + "]");
    }
  } else if (type == "Split") {
    append_split(node, path, where);
  } else if (type == "ByteLevel") {
    Step step;
  step.kind = Step::Kind::kByteLevel;
    step.add_prefix_space = json_bool(node, "add_prefix_space", false, path, where);
    if (json_bool(node, "use_regex", true, path, where)) step.regex = std::make_shared<RegexSplitter>(kGpt2Pattern, false);
    if (!byte_level_) byte_level_ = std::make_shared<const ByteLevelMap>();
    steps_.push_back(std::move(step));
  } else if (type == "Metaspace") {
    append_metaspace(node, path, where);
  } else if (type == "Digits") {
    // tokenizers' Digits splits on char::is_numeric (\p{N}), Isolated: each digit alone, or
    // Contiguous: each run of digits as one piece.
    Step step;
    step.kind = Step::Kind::kSplitIsolated;
    const bool individual = json_bool(node, "individual_digits", false, path, where);
    step.regex = std::make_shared<RegexSplitter>(individual ? R"(\p{N})" : R"(\p{N}+)", false);
    steps_.push_back(std::move(step));
  } else {
    throw Error(path + ": field '" + where + ".type' is '" + type +
                "'; supported pre-tokenizers: Sequence, Split, ByteLevel, Metaspace, Digits");
  }
}

void PreTokenizer::append_split(const nlohmann::json& node, const std::string& path, const std::string& where) {
  const auto* pattern = json_field(node, "pattern", path, where);
  std::string text;
  bool literal = false;
  if (pattern && pattern->is_object() && pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
    text = (*pattern)["Regex"].get<std::string>();
  } else if (pattern && pattern->is_object() && pattern->contains("String") && (*pattern)["String"].is_string()) {
    text = (*pattern)["String"].get<std::string>();
    literal = true;
  } else {
    throw Error(path + ": field '" + where + ".pattern' must be {\"Regex\": ...} or {\"String\": ...}");
  }
  if (json_bool(node, "invert", false, path, where)) throw Error(path + ": field '" + where + ".invert' = true is not supported");
  const std::string behavior = json_string(node, "behavior", "Isolated", path, where);
  Step step;
  step.kind = Step::Kind::kSplitIsolated;
  if (behavior == "Isolated") {
    step.kind = Step::Kind::kSplitIsolated;
  } else if (behavior == "Removed") {
    step.kind = Step::Kind::kSplitRemoved;
  } else if (behavior == "MergedWithPrevious") {
    step.kind = Step::Kind::kSplitMergedWithPrevious;
  } else if (behavior == "MergedWithNext") {
    step.kind = Step::Kind::kSplitMergedWithNext;
  } else {
    throw Error(path + ": field '" + where + ".behavior' is '" + behavior +
                "'; supported: Isolated, Removed, MergedWithPrevious, MergedWithNext");
  }
  try {
    step.regex = std::make_shared<RegexSplitter>(text, literal);
  } catch (const Error& e) {
    throw Error(path + ": field '" + where + ".pattern': " + e.what());
  }
  steps_.push_back(std::move(step));
}

void PreTokenizer::append_metaspace(const nlohmann::json& node, const std::string& path, const std::string& where) {
  Step step;
  step.kind = Step::Kind::kMetaspace;
  step.replacement = json_string(node, "replacement", kMetaspace, path, where);
  if (json_field(node, "prepend_scheme", path, where)) {
    step.scheme = prepend_scheme_from(json_string(node, "prepend_scheme", "always", path, where), path, where);
  } else {  // files written before prepend_scheme existed
    step.scheme = json_bool(node, "add_prefix_space", true, path, where) ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  step.split = json_bool(node, "split", true, path, where);
  steps_.push_back(std::move(step));
}

void PreTokenizer::apply(const Step& step, const Word& word, std::vector<Word>& out) const {
  auto emit = [&](size_t offset, std::string text) {
    if (!text.empty()) out.push_back({std::move(text), word.at_text_start && offset == 0});
  };
  switch (step.kind) {
    case Step::Kind::kSplitIsolated:
    case Step::Kind::kSplitRemoved:
      for (auto& [offset, text] : split_with_offsets(*step.regex, word.text, step.kind == Step::Kind::kSplitIsolated)) {
        emit(offset, std::move(text));
      }
      break;
    case Step::Kind::kSplitMergedWithPrevious:
    case Step::Kind::kSplitMergedWithNext:
      for (auto& [offset, text] : split_merged(*step.regex, word.text, step.kind == Step::Kind::kSplitMergedWithPrevious)) {
        emit(offset, std::move(text));
      }
      break;
    case Step::Kind::kByteLevel: {
      std::string text = word.text;
      if (step.add_prefix_space && text.rfind(' ', 0) != 0) text.insert(0, " ");
      if (!step.regex) {
        emit(0, byte_level_->encode(text));
      } else {
        for (const auto& part : step.regex->split_isolated(text)) emit(0, byte_level_->encode(part));
      }
      break;
    }
    case Step::Kind::kMetaspace: {
      std::string text;
      for (char c : word.text) text += c == ' ' ? step.replacement : std::string(1, c);
      const bool prepend = text.rfind(step.replacement, 0) != 0 &&
                           (step.scheme == PrependScheme::kAlways || (step.scheme == PrependScheme::kFirst && word.at_text_start));
      if (prepend) text.insert(0, step.replacement);
      if (!step.split) {
        emit(0, std::move(text));
        break;
      }
      size_t begin = 0;  // a new word starts at every replacement (MergedWithNext)
      for (size_t pos = text.find(step.replacement, 1); pos != std::string::npos; pos = text.find(step.replacement, pos + 1)) {
        emit(begin, text.substr(begin, pos - begin));
        begin = pos;
      }
      emit(begin, text.substr(begin));
      break;
    }
  }
}

std::vector<std::string> PreTokenizer::split(const std::string& text, bool at_text_start) const {
  std::vector<Word> words{{text, at_text_start}};
  for (const Step& step : steps_) {
    std::vector<Word> next;
    for (const Word& word : words) apply(step, word, next);
    words = std::move(next);
  }
  std::vector<std::string> out;
  out.reserve(words.size());
  for (auto& word : words) out.push_back(std::move(word.text));
  return out;
}

}  // namespace finetune
