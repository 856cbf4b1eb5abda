// The one way distributed failures are phrased: "rank R: <operation> <what went wrong>", so a
// message from any rank says who failed and in which collective.
#pragma once

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>

#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {

inline DistributedError distributed_error(int rank, const std::string& operation, const std::string& detail) {
  return DistributedError("rank " + std::to_string(rank) + ": " + operation + " " + detail);
}

// The first line of a LibTorch error: c10 messages append a C++ backtrace after it.
inline std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

// "2 s", "0.5 s": timeouts as the user wrote them (seconds).
inline std::string seconds_text(std::chrono::milliseconds duration) {
  std::ostringstream text;
  text << static_cast<double>(duration.count()) / 1000.0 << " s";
  return text.str();
}

// For a background thread (watchdog, peer monitor) whose failure the main thread did not act on in
// time, e.g. because it is stuck in a call the abort cannot release: log and exit with status 1.
[[noreturn]] inline void log_and_exit(const std::string& message) {
  log::error(message);
  std::_Exit(1);
}

}  // namespace finetune
