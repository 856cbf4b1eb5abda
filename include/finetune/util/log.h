// Logging front end. LibTorch ships its own (newer) fmt headers, which clash with the system fmt
// that spdlog is built against, so LibTorch-using files log through these functions (message
// strings built with c10::str or std::to_string) and only src/util/log.cpp includes spdlog.
#pragma once

#include <string>
#include <vector>

namespace finetune::log {

enum class Level { Debug, Info, Warn, Error };

// The --log_level names (also FINETUNE_LOG_LEVEL through the option layers), in Level's order.
inline const std::vector<std::string>& level_names() {
  static const std::vector<std::string> names = {"debug", "info", "warn", "error"};
  return names;
}
// The level of one of level_names() (UsageError otherwise).
Level level_from_name(const std::string& name);

// Prefixes messages with "[rank R]" when world_size > 1; messages below `level` are dropped.
void configure(int rank, int world_size, Level level = Level::Info);

void debug(const std::string& message);
void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

}  // namespace finetune::log
