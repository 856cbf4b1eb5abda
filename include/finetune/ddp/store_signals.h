// Signals between ranks through the rendezvous store, outside any collective: one rank publishes
// a key when its work is done (one download per node, say) and the ranks that need it wait for
// the key. A wait is bounded by the DDP timeout and ends at once with the peer monitor's verdict
// when a peer died or failed (Note [Peer heartbeats]), so a dead publisher never hangs the others.
// Keys live under "signal/" in the job's store prefix.
#pragma once

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "finetune/ddp/peer_monitor.h"

namespace finetune {

class StoreSignals {
 public:
  StoreSignals(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds timeout);

  void publish(const std::string& key, const std::string& value);
  // `what` names the wait in a timeout message ("download of Qwen/Qwen3-8B by local rank 0").
  std::string wait_for(const std::string& key, const std::string& what, const PeerMonitor& monitor);

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  std::chrono::milliseconds timeout_;
};

}  // namespace finetune
