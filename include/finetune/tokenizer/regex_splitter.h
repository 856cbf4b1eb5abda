// The `Split` pre-tokenizer's regex, run through PCRE2 (UTF + UCP) instead of tokenizers' Oniguruma.
// The pattern is translated where the two engines differ: Oniguruma's \s is Unicode White_Space,
// which includes U+0085 (NEL); PCRE2's \s under UCP does not, so \s / \S are widened to match.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace finetune {

class RegexSplitter {
 public:
  // `literal`: the pattern is a plain string ({"String": ...} in tokenizer.json), not a regex.
  // Throws finetune::Error with PCRE2's message when the pattern does not compile.
  RegexSplitter(const std::string& pattern, bool literal);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Byte ranges [begin, end) of every non-overlapping match, left to right.
  std::vector<std::pair<size_t, size_t>> find_matches(const std::string& text) const;

  // behavior "Isolated": matches and the text between them, in order, empty pieces dropped.
  std::vector<std::string> split_isolated(const std::string& text) const;
  // behavior "Removed": only the text between matches.
  std::vector<std::string> split_removed(const std::string& text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// Oniguruma -> PCRE2 pattern translation (exposed for tests).
std::string translate_oniguruma_pattern(const std::string& pattern);

}  // namespace finetune
