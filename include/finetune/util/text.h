// Small string helpers shared by modules.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace finetune {

// ASCII lowercase.
std::string lowercase(std::string s);

// Without leading and trailing ASCII whitespace (space, tab, CR, LF).
std::string trim(const std::string& s);

bool starts_with(const std::string& text, const std::string& prefix);
bool ends_with(const std::string& text, const std::string& suffix);

// The items separated by `separator`.
std::string join(const std::vector<std::string>& items, const std::string& separator);

// The candidate nearest to `word` in edit distance (ASCII case ignored), when it is close enough to
// be a typo of it (at most a third of the word's length, at least 1): the "did you mean" of an
// error message. Ties go to the earlier candidate.
std::optional<std::string> closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace finetune
