// Watchdog for collectives that cannot be waited on with a timeout (NCCL kernels on a stream):
// a thread polls every tracked operation's completion probe and an async-error probe. When an
// operation exceeds the timeout, or an async error appears, it
//   1. records the failure ("rank R: <operation> timed out after N s" / "... NCCL error ..."),
//   2. calls `abort` (ncclCommAbort) so the stuck kernels and the peers are released,
//   3. lets the next wait()/throw_if_failed() on the main thread raise DistributedError,
//   4. and, because the main thread may itself be stuck inside a CUDA call, terminates the
//      process after `exit_grace` if nobody noticed the failure by then.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "finetune/ddp/ddp_defaults.h"

namespace finetune {

struct WatchdogOptions {
  std::chrono::milliseconds timeout{static_cast<int64_t>(kDefaultDdpTimeoutSeconds * 1000)};
  std::chrono::milliseconds poll_interval{100};
  std::chrono::milliseconds exit_grace{5000};
  // Called when nobody noticed a failure within exit_grace; default: log the message, _Exit(1).
  std::function<void(const std::string& message)> terminate;
};

class Watchdog {
 public:
  // is_done: true once finished (may throw: treated as a failure of that operation).
  using DoneProbe = std::function<bool()>;
  // An async error of the whole communicator, if any (e.g. ncclCommGetAsyncError).
  using ErrorProbe = std::function<std::optional<std::string>()>;

  Watchdog(int rank, WatchdogOptions options, ErrorProbe error_probe, std::function<void()> abort);
  ~Watchdog();  // stop()s
  // Ends the polling thread (no probe runs after it returns); fail() and the rest still work.
  void stop();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts the clock for `operation`; returns an id for forget().
  uint64_t track(const std::string& operation, DoneProbe is_done);
  void forget(uint64_t id);

  // Records a failure found elsewhere (e.g. an NCCL call that returned an error) and aborts.
  void fail(const std::string& message);
  bool failed() const;
  // Throws the recorded DistributedError (and marks it noticed); no-op when healthy.
  void throw_if_failed();

  std::chrono::milliseconds timeout() const { return options_.timeout; }

 private:
  struct Tracked {
    std::string operation;
    std::chrono::steady_clock::time_point started;
    DoneProbe is_done;
  };
  void run();
  void poll_once();

  const int rank_;
  WatchdogOptions options_;
  ErrorProbe error_probe_;
  std::function<void()> abort_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, Tracked> tracked_;
  uint64_t next_id_ = 0;
  bool stop_ = false;
  std::optional<std::string> failure_;
  std::optional<std::chrono::steady_clock::time_point> failed_at_;
  std::atomic<bool> failure_noticed_{false};
  bool terminated_ = false;
  std::thread thread_;
};

}  // namespace finetune
