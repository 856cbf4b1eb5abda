#include "finetune/ddp/watchdog.h"

#include <exception>
#include <vector>

#include "finetune/ddp/ddp_error.h"
#include "finetune/util/log.h"

namespace finetune {

Watchdog::Watchdog(int rank, WatchdogOptions options, ErrorProbe error_probe, std::function<void()> abort)
    : rank_(rank), options_(std::move(options)), error_probe_(std::move(error_probe)), abort_(std::move(abort)) {
  if (!options_.terminate) {
    options_.terminate = [](const std::string& message) {
      log_and_exit(message + " (the main thread did not return from the stuck operation; terminating the process)");
    };
  }
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Watchdog::track(const std::string& operation, DoneProbe is_done) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = next_id_++;
  tracked_.emplace(id, Tracked{operation, std::chrono::steady_clock::now(), std::move(is_done)});
  return id;
}

void Watchdog::forget(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  tracked_.erase(id);
}

void Watchdog::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_) return;  // the first failure is the cause; later ones are its consequences
    failure_ = message;
    failed_at_ = std::chrono::steady_clock::now();
  }
  log::error(message + "; aborting communication");
  try {
    if (abort_) abort_();
  } catch (const std::exception& e) {
    log::error("rank " + std::to_string(rank_) + ": abort after failure raised: " + e.what());
  }
}

bool Watchdog::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_.has_value();
}

void Watchdog::throw_if_failed() {
  std::optional<std::string> failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure = failure_;
  }
  if (failure) {
    failure_noticed_ = true;
    throw DistributedError(*failure);
  }
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, options_.poll_interval, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    poll_once();
    lock.lock();
  }
}

void Watchdog::poll_once() {
  std::vector<std::pair<uint64_t, Tracked>> snapshot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (failure_) {
      const bool overdue = std::chrono::steady_clock::now() - *failed_at_ > options_.exit_grace;
      if (overdue && !failure_noticed_ && !terminated_) {
        terminated_ = true;
        const std::string message = *failure_;
        lock.unlock();
        options_.terminate(message);
      }
      return;
    }
    snapshot.assign(tracked_.begin(), tracked_.end());
  }

  if (error_probe_) {
    std::optional<std::string> error;
    try {
      error = error_probe_();
    } catch (const std::exception& e) {
      error = std::string("error probe raised: ") + e.what();
    }
    if (error) {
      fail("rank " + std::to_string(rank_) + ": " + *error);
      return;
    }
  }

  const auto now = std::chrono::steady_clock::now();
  for (auto& [id, tracked] : snapshot) {
    bool done = false;
    try {
      done = tracked.is_done();
    } catch (const std::exception& e) {
      fail(distributed_error(rank_, tracked.operation, std::string("failed: ") + e.what()).what());
      return;
    }
    if (done) {
      forget(id);
    } else if (now - tracked.started > options_.timeout) {
      fail(distributed_error(rank_, tracked.operation, "timed out after " + seconds_text(options_.timeout)).what());
      return;
    }
  }
}

}  // namespace finetune
