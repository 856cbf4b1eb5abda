// fsspec's glob syntax, in which HF datasets writes its data-file patterns (fsspec/utils.py
// glob_translate, the rules of fsspec >= 2023.12, which datasets 5 requires): '*' matches a run of
// characters other than '/', '?' one such character, '[...]' a character class ('!' negates), and
// '**' as a whole path component any number of directories ("**/x" matches "x" and "a/b/x"). A
// pattern matches a whole path. Private to src/data/ (data_file_splits.cpp).
//
// Matched by a small NFA over bytes in one pass over the path, holding the set of live states: time
// the path's length times the live states (a handful for datasets' patterns), memory linear in the
// pattern, no recursion (std::regex recursed per character: a 40 KB name overflowed the stack).
#pragma once

#include <bitset>
#include <string>
#include <vector>

namespace finetune {

// One NFA state: consume one byte of `bytes` and go on (kOne), consume any number of them and stay
// (kRun), or go on or jump forward to `skip_to` without consuming (kOptional, an "(...)?").
struct GlobStep {
  enum Kind { kOne, kRun, kOptional } kind;
  std::bitset<256> bytes;
  size_t skip_to = 0;
};

class PathGlob {
 public:
  explicit PathGlob(const std::string& pattern);  // throws std::invalid_argument on "a**b", "[z-a]"
  // `path` is relative to the directory the pattern is resolved in, '/'-separated.
  bool matches(const std::string& path) const;

 private:
  std::vector<GlobStep> steps_;  // state steps_.size() accepts
};

}  // namespace finetune
