// Error types. Every failure is an exception carrying its context (file, tensor, field, rank);
// main() catches once, logs the message and exits non-zero.
//   UsageError -> exit 2 (a wrong flag, a bad or out-of-range value)
//   Error      -> exit 1 (bad input files, runtime failures)
//   Preempted  -> exit 143 (stopped by SIGTERM/SIGUSR1 after saving a checkpoint)
#pragma once

#include <stdexcept>
#include <string>

namespace finetune {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A command-line / config problem the user must fix; main() exits with status 2.
struct UsageError : Error {
  using Error::Error;
};

// A distributed failure (timeout, peer died, NCCL async error); main() aborts communication first.
struct DistributedError : Error {
  using Error::Error;
};

// A run stopped on request (SIGTERM/SIGUSR1) after saving what it could (Note [Preemption] in
// launch/stop_request.h); main() exits with kPreemptedExitCode.
struct Preempted : Error {
  using Error::Error;
};

}  // namespace finetune
