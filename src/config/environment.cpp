// current_environment(): the one place that reads the process environment, so everything
// downstream can be a pure function of an EnvMap.
#include <cstring>

#include "finetune/config/options.h"

extern char** environ;

namespace finetune {

EnvMap current_environment() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    if (equals == nullptr) continue;
    env.emplace(std::string(*entry, static_cast<size_t>(equals - *entry)), std::string(equals + 1));
  }
  return env;
}

}  // namespace finetune
