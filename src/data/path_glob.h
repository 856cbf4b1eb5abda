// fsspec's glob syntax, in which HF datasets writes its data-file patterns (fsspec/utils.py
// glob_translate, the rules of fsspec >= 2023.12, which datasets 5 requires): '*' matches a run of
// characters other than '/', '?' one such character, '[...]' a character class ('!' negates), and
// '**' as a whole path component any number of directories ("**/x" matches "x" and "a/b/x"). A
// pattern matches a whole path. Private to src/config/ (data_file_splits.cpp).
#pragma once

#include <regex>
#include <string>

namespace finetune {

class PathGlob {
 public:
  explicit PathGlob(const std::string& pattern);  // throws std::invalid_argument on "a**b"
  // `path` is relative to the directory the pattern is resolved in, '/'-separated.
  bool matches(const std::string& path) const { return std::regex_match(path, regex_); }

 private:
  std::regex regex_;
};

}  // namespace finetune
