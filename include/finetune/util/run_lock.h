// One run per --output_dir: an advisory lock (flock) on OUTPUT_DIR/.finetune.lock, held by rank 0
// for the run's lifetime and released by the kernel when the process ends, however it ends. The
// file says who holds it ("pid <pid> host <host>"), so a second run (with or without
// --overwrite_output_dir) is refused naming the holder. The lock file itself is not a run
// artifact: it stays, empty of meaning once unlocked.
#pragma once

#include <string>

namespace finetune {

inline constexpr const char* kRunLockFile = ".finetune.lock";

class RunLock {
 public:
  // Creates output_dir when missing, then takes the lock; UsageError naming the holder's pid and
  // host when another process holds it, Error (with errno's text) when the file cannot be made.
  explicit RunLock(const std::string& output_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace finetune
