#include "finetune/util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "finetune/util/errors.h"

namespace finetune::log {

Level level_from_name(const std::string& name) {
  const auto& names = level_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<Level>(i);
  }
  throw UsageError("--log_level: unknown level \"" + name + "\"");
}

void configure(int rank, int world_size, Level level) {
  const std::string prefix = world_size > 1 ? "[rank " + std::to_string(rank) + "] " : "";
  // Diagnostics go to stderr: stdout carries only results (the JSON summary line), so callers
  // can parse it. spdlog's default logger would write to stdout.
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("finetune", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_pattern("[%H:%M:%S] [%^%l%$] " + prefix + "%v");
  switch (level) {
    case Level::Debug: spdlog::set_level(spdlog::level::debug); break;
    case Level::Info: spdlog::set_level(spdlog::level::info); break;
    case Level::Warn: spdlog::set_level(spdlog::level::warn); break;
    case Level::Error: spdlog::set_level(spdlog::level::err); break;
  }
}

void debug(const std::string& message) { spdlog::debug("{}", message); }
void info(const std::string& message) { spdlog::info("{}", message); }
void warn(const std::string& message) { spdlog::warn("{}", message); }
void error(const std::string& message) { spdlog::error("{}", message); }

}  // namespace finetune::log
