// current_environment(): see environment.h.
#include <cstring>

#include "finetune/launch/environment.h"

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

std::string env_value(const EnvMap& env, const std::string& key) {
  const auto it = env.find(key);
  return it == env.end() ? "" : it->second;
}

}  // namespace finetune
