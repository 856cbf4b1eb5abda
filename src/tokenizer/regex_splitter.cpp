#include "finetune/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "finetune/util/errors.h"

namespace finetune {

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
};

std::string translate_oniguruma_pattern(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (next == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

RegexSplitter::RegexSplitter(const std::string& pattern, bool literal) : compiled_(new Compiled) {
  const std::string translated = literal ? pattern : translate_oniguruma_pattern(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL refuses PCRE2_UCP (which only changes how \d, \w, ... match, and a literal has none).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                                  &error_code, &error_offset, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw Error("regex pattern '" + pattern + "' does not compile at offset " + std::to_string(error_offset) +
                ": " + reinterpret_cast<const char*>(message));
  }
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() {
  if (compiled_ && compiled_->code) pcre2_code_free(compiled_->code);
}

std::vector<std::pair<size_t, size_t>> RegexSplitter::find_matches(const std::string& text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  // Input is not validated as UTF-8 here only if the caller guarantees it; invalid UTF-8 is an error.
  uint32_t options = 0;
  while (offset <= text.size()) {
    const int rc = compiled_->jit
                       ? pcre2_jit_match(compiled_->code, subject, text.size(), offset, options, data.get(), nullptr)
                       : pcre2_match(compiled_->code, subject, text.size(), offset, options, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(std::string("regex match failed: ") + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // Empty match: step over one code point so the scan always advances.
      if (begin >= text.size()) break;
      offset = begin + 1;
      while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    matches.emplace_back(begin, end);
    offset = end;
    options = PCRE2_NO_UTF_CHECK;  // the subject was checked on the first call
  }
  return matches;
}

std::vector<std::string> RegexSplitter::split_isolated(const std::string& text) const {
  std::vector<std::string> pieces;
  size_t last = 0;
  for (const auto& [begin, end] : find_matches(text)) {
    if (begin > last) pieces.push_back(text.substr(last, begin - last));
    pieces.push_back(text.substr(begin, end - begin));
    last = end;
  }
  if (last < text.size()) pieces.push_back(text.substr(last));
  return pieces;
}

std::vector<std::string> RegexSplitter::split_removed(const std::string& text) const {
  std::vector<std::string> pieces;
  size_t last = 0;
  for (const auto& [begin, end] : find_matches(text)) {
    if (begin > last) pieces.push_back(text.substr(last, begin - last));
    last = end;
  }
  if (last < text.size()) pieces.push_back(text.substr(last));
  return pieces;
}

}  // namespace finetune
