// What happens when an input brings the fuzzing process down: a fatal signal (SIGSEGV, stack
// overflow included, SIGABRT, SIGBUS, SIGFPE, SIGILL) or the per-input time limit (SIGPROF: CPU
// time; SIGALRM: a wall-clock backstop, Note [Fuzz time limits] in crash_guard.cpp).
// The handler writes the input being run to CRASH_DIR/<target>-<crash|hang>-<hash>.bin, sends the
// target's counts so far to the parent process, and exits; the parent reports it.
//
// A signal handler can only reach state through a global: the guard being constructed registers
// itself in one file-local pointer (in the single-threaded fuzzing child), cleared on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace finetune::fuzz {

// A target's counts, sent to the parent as raw bytes through a pipe.
struct FuzzStats {
  uint64_t inputs = 0;
  uint64_t accepted = 0;       // run() returned
  uint64_t rejected = 0;       // run() threw finetune::Error
  uint64_t failures = 0;       // run() threw anything else (std::bad_alloc under the memory limit, ...)
  uint64_t crashes = 0;        // a fatal signal
  uint64_t hangs = 0;          // over the per-input time limit
  uint64_t seed_failures = 0;  // a seed input was not accepted
};

class CrashGuard {
 public:
  // Installs the handlers (on an alternate stack, so a stack overflow is caught) for one target.
  CrashGuard(const std::string& crash_dir, const std::string& target, int stats_fd, const FuzzStats* stats);
  ~CrashGuard();
  CrashGuard(const CrashGuard&) = delete;
  CrashGuard& operator=(const CrashGuard&) = delete;

  // Brackets one input: the time limits run from begin() to end().
  void begin(const std::string& input, unsigned timeout_ms);
  void end();

  // Writes `input` to CRASH_DIR/<target>-<kind>-<hash>.bin; returns the path ("" on failure).
  std::string save(const std::string& input, const char* kind) const;

 private:
  static void on_signal(int signal);

  char path_prefix_[4096] = {};  // CRASH_DIR/<target>-
  int stats_fd_;
  const FuzzStats* stats_;
  const char* input_ = nullptr;
  size_t input_size_ = 0;
  void* alt_stack_ = nullptr;
};

// FNV-1a of the bytes: names crash files, and is async-signal-safe.
uint64_t input_hash(const char* data, size_t size);

}  // namespace finetune::fuzz
