// Logging front end. LibTorch ships its own (newer) fmt headers, which clash with the system fmt
// that spdlog is built against, so LibTorch-using files log through these functions (message
// strings built with c10::str or std::to_string) and only src/util/log.cpp includes spdlog.
#pragma once

#include <string>

namespace finetune::log {

enum class Level { Debug, Info, Warn, Error };

// Prefixes messages with "[rank R]" when world_size > 1; level from FINETUNE_LOG_LEVEL or `level`.
void configure(int rank, int world_size, Level level = Level::Info);

void debug(const std::string& message);
void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

}  // namespace finetune::log
