#include "finetune/ddp/store_signals.h"

#include <thread>

#include "finetune/ddp/ddp_error.h"

namespace finetune {
namespace {

// How often a waiting rank looks at the key and at the peer monitor's verdict.
constexpr std::chrono::milliseconds kPollInterval{100};

std::string signal_key(const std::string& key) { return "signal/" + key; }

}  // namespace

StoreSignals::StoreSignals(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), timeout_(timeout) {}

void StoreSignals::publish(const std::string& key, const std::string& value) {
  try {
    store_->set(signal_key(key), std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    throw distributed_error(rank_, "publishing " + key, "failed: " + first_line(e.what()));
  }
}

std::string StoreSignals::wait_for(const std::string& key, const std::string& what, const PeerMonitor& monitor) {
  const auto started = std::chrono::steady_clock::now();
  try {
    while (!store_->check({signal_key(key)})) {
      if (const auto loss = monitor.peer_loss()) throw distributed_error(rank_, "waiting for " + what, "failed: " + loss->detail);
      if (std::chrono::steady_clock::now() - started > timeout_) {
        throw distributed_error(rank_, "waiting for " + what, "timed out after " + seconds_text(timeout_) +
                                                                  " (--ddp_timeout)");
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    const auto bytes = store_->get(signal_key(key));
    return std::string(bytes.begin(), bytes.end());
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {  // the store went away: its host (rank 0) is gone
    if (const auto loss = monitor.wait_for_peer_loss()) throw distributed_error(rank_, "waiting for " + what, "failed: " + loss->detail);
    throw distributed_error(rank_, "waiting for " + what, "failed: " + first_line(e.what()));
  }
}

}  // namespace finetune
