// current_environment(), env_value(), host_name(): see environment.h.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "finetune/launch/environment.h"
#include "finetune/util/errors.h"

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

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) throw Error(std::string("gethostname: ") + std::strerror(errno));
  return name;
}

}  // namespace finetune
