#include "finetune/util/text.h"

#include <algorithm>
#include <cctype>

namespace finetune {

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace finetune
