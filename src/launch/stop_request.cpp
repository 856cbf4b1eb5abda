#include "finetune/launch/stop_request.h"

#include <signal.h>

#include <atomic>

namespace finetune {
namespace {

// Note [Preemption]: the one process-wide variable, written by the handler alone.
std::atomic<int> g_received_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler may only touch a lock-free atomic");

void record_signal(int signal_number) {
  int none = 0;
  if (g_received_signal.compare_exchange_strong(none, signal_number)) {
    // The next SIGTERM/SIGUSR1 takes the default action: the process ends at once.
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGUSR1, SIG_DFL);
  }
}

void install_recording_handlers() {
  struct sigaction action = {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in flight (a read, a collective's wait) go on
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGUSR1, &action, nullptr);
}

}  // namespace

void StopRequest::install() {
  if (g_received_signal.load() == 0) install_recording_handlers();
}

int StopRequest::signal_received() { return g_received_signal.load(); }

const char* StopRequest::signal_name(int signal_number) {
  switch (signal_number) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

void StopRequest::reset_for_testing() {
  g_received_signal.store(0);
  install_recording_handlers();
}

}  // namespace finetune
