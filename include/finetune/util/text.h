// Small string helpers shared by modules.
#pragma once

#include <string>

namespace finetune {

// ASCII lowercase.
std::string lowercase(std::string s);

}  // namespace finetune
