#include "finetune/tokenizer/added_vocabulary.h"

#include <cctype>

#include "finetune/util/utf8.h"

namespace finetune {

AddedToken added_token_from_json(const nlohmann::json& entry, int32_t id) {
  AddedToken token;
  token.id = id;
  token.content = entry.at("content").get<std::string>();
  token.special = entry.value("special", false);
  token.lstrip = entry.value("lstrip", false);
  token.rstrip = entry.value("rstrip", false);
  token.single_word = entry.value("single_word", false);
  token.normalized = entry.value("normalized", !token.special);
  return token;
}
namespace {

// Decodes the code point that ends just before byte offset `end`.
char32_t code_point_before(const std::string& text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  const auto cps = utf8_decode(text.substr(start, end - start));
  return cps.empty() ? 0 : cps[0];
}

char32_t code_point_at(const std::string& text, size_t begin) {
  const size_t len = utf8_sequence_length(static_cast<unsigned char>(text[begin]));
  const auto cps = utf8_decode(text.substr(begin, len));
  return cps.empty() ? 0 : cps[0];
}

size_t code_point_length_before(const std::string& text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return end - start;
}

// tokenizers uses char::is_alphanumeric || '_'; beyond ASCII we treat any non-space, non-ASCII code
// point as a word character, which is right for letters and digits of every script.
bool is_word_character(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) || c == '_';
  return !is_unicode_whitespace(c);
}

}  // namespace

void AddedVocabulary::add(const AddedToken& token) {
  auto existing = index_by_content_.find(token.content);
  if (existing != index_by_content_.end()) {
    tokens_[existing->second] = token;
  } else {
    index_by_content_[token.content] = tokens_.size();
    tokens_.push_back(token);
  }
  index_by_id_[token.id] = index_by_content_[token.content];
  if (!token.content.empty()) is_first_byte_[static_cast<unsigned char>(token.content[0])] = true;
}

const AddedToken* AddedVocabulary::find_by_id(int32_t id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_by_content(const std::string& content) const {
  auto it = index_by_content_.find(content);
  return it == index_by_content_.end() ? nullptr : &tokens_[it->second];
}

bool AddedVocabulary::has_normalized_tokens() const {
  for (const auto& t : tokens_)
    if (t.normalized) return true;
  return false;
}

std::vector<AddedTokenSplit> AddedVocabulary::split(const std::string& text, bool normalized) const {
  std::vector<AddedTokenSplit> out;
  size_t plain_begin = 0;  // start of the text not yet emitted
  size_t pos = 0;
  while (pos < text.size()) {
    // Leftmost-longest: the longest token content starting at `pos`.
    const AddedToken* best = nullptr;
    if (is_first_byte_[static_cast<unsigned char>(text[pos])])
    for (const auto& token : tokens_) {
      if (token.normalized != normalized || token.content.empty()) continue;
      if (best && token.content.size() <= best->content.size()) continue;
      if (text.compare(pos, token.content.size(), token.content) != 0) continue;
      if (token.single_word) {
        const size_t end = pos + token.content.size();
        const bool word_before = pos > 0 && is_word_character(code_point_before(text, pos));
        const bool word_after = end < text.size() && is_word_character(code_point_at(text, end));
        if (word_before || word_after) continue;
      }
      best = &token;
    }
    if (!best) {
      pos += utf8_sequence_length(static_cast<unsigned char>(text[pos]));
      continue;
    }
    size_t match_begin = pos;
    size_t match_end = pos + best->content.size();
    if (best->lstrip) {
      while (match_begin > plain_begin && is_unicode_whitespace(code_point_before(text, match_begin))) {
        match_begin -= code_point_length_before(text, match_begin);
      }
    }
    if (best->rstrip) {
      while (match_end < text.size() && is_unicode_whitespace(code_point_at(text, match_end))) {
        match_end += utf8_sequence_length(static_cast<unsigned char>(text[match_end]));
      }
    }
    if (match_begin > plain_begin) out.push_back({text.substr(plain_begin, match_begin - plain_begin), -1});
    out.push_back({text.substr(match_begin, match_end - match_begin), best->id});
    plain_begin = pos = match_end;
  }
  if (plain_begin < text.size()) out.push_back({text.substr(plain_begin), -1});
  return out;
}

}  // namespace finetune
