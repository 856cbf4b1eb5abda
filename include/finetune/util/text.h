// Small string helpers shared by modules.
#pragma once

#include <string>
#include <vector>

namespace finetune {

// ASCII lowercase.
std::string lowercase(std::string s);

// Without leading and trailing ASCII whitespace (space, tab, CR, LF).
std::string trim(const std::string& s);

// The items separated by `separator`.
std::string join(const std::vector<std::string>& items, const std::string& separator);

}  // namespace finetune
