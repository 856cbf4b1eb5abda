// CPU collectives through c10d::ProcessGroupGloo. Every wait is bounded by the timeout (Gloo's
// own context timeout covers the transfer, Work::wait(timeout) covers the host wait); a peer that
// died surfaces as an exception or a timeout and is rethrown as DistributedError naming the rank
// and the operation.
//
// Gloo's transport notices a dead peer by itself (its TCP pairs break), but not which one; so a
// transfer that fails waits for the peer monitor's verdict (Note [Peer heartbeats]), which names
// the rank, before it is reported. A verdict that comes first makes every later collective throw
// it; a wait already blocked on a peer that is frozen rather than dead is not released by Gloo
// (ProcessGroupGloo has no abort): the monitor's exit grace ends the process then.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "finetune/ddp/backends.h"
#include "finetune/ddp/ddp_error.h"
#include "finetune/ddp/peer_monitor.h"
#include "finetune/ddp/store_bootstrap.h"
#include "finetune/ddp/store_signals.h"
#include "finetune/util/log.h"

namespace finetune {

namespace {

using Milliseconds = std::chrono::milliseconds;

// Waits for `work`; any failure becomes a DistributedError naming rank and operation, and the dead
// peer when the monitor finds one.
void wait_for_work(const c10::intrusive_ptr<c10d::Work>& work, Milliseconds timeout, int rank,
                   const std::string& operation, const PeerMonitor& monitor) {
  const auto started = std::chrono::steady_clock::now();
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    const bool timed_out = std::chrono::steady_clock::now() - started >= timeout;
    if (timed_out) {
      throw distributed_error(rank, operation,
                              "timed out after " + seconds_text(timeout) + " (a peer is missing or stuck): " +
                                  first_line(e.what()));
    }
    if (const auto loss = monitor.wait_for_peer_loss()) {
      throw distributed_error(rank, operation, "failed: " + loss->detail);
    }
    throw distributed_error(rank, operation, "failed (a peer died or disconnected?): " + first_line(e.what()));
  }
}

void check_cpu_tensor(const at::Tensor& tensor, int rank, const std::string& operation) {
  if (!tensor.defined() || !tensor.device().is_cpu()) {
    throw distributed_error(rank, operation, "needs a CPU tensor for the gloo backend");
  }
}

class GlooWork : public CollectiveWork {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, at::Tensor tensor, at::Tensor result, Milliseconds timeout,
           int rank, std::string operation, const PeerMonitor& monitor)
      : work_(std::move(work)), tensor_(std::move(tensor)), result_(std::move(result)), timeout_(timeout),
        rank_(rank), operation_(std::move(operation)), monitor_(monitor) {}

  void wait() override {
    if (done_) return;
    wait_for_work(work_, timeout_, rank_, operation_, monitor_);  // a failed work throws again on every wait
    done_ = true;
    if (!result_.is_same(tensor_)) tensor_.copy_(result_);
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  at::Tensor tensor_;  // the caller's tensor
  at::Tensor result_;  // what Gloo reduced: tensor_ itself, or a contiguous copy of it
  Milliseconds timeout_;
  int rank_;
  std::string operation_;
  const PeerMonitor& monitor_;  // the communicator's, which outlives its works
  bool done_ = false;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                   std::optional<int> store_host, const GlooDevices& devices, Milliseconds timeout,
                   const PeerMonitorOptions& monitor_options)
      : rank_(rank), world_size_(world_size), timeout_(timeout), signals_(store, rank, timeout) {
    try {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      for (const std::string& interface : devices.interfaces)
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
      if (options->devices.empty()) {
        options->devices.push_back(devices.hostname.empty()
                                       ? c10d::ProcessGroupGloo::createDefaultDevice()
                                       : c10d::ProcessGroupGloo::createDeviceForHostname(devices.hostname));
      }
      options->threads = 2;
      // Gloo's rendezvous reads the store with the store's timeout.
      store->setTimeout(timeout);
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
    } catch (const std::exception& e) {
      throw distributed_error(rank, "gloo rendezvous of " + std::to_string(world_size) + " ranks",
                              "failed (timeout " + seconds_text(timeout) + "): " + first_line(e.what()));
    }
    monitor_ = std::make_unique<PeerMonitor>(store, rank, world_size, store_host, monitor_options,
                                             [this](const std::string& message) { on_peer_lost(message); });
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::unique_ptr<CollectiveWork> all_reduce_async(at::Tensor& tensor, const std::string& what) override {
    check_cpu_tensor(tensor, rank_, what);
    at::Tensor result = tensor.is_contiguous() ? tensor : tensor.contiguous();
    std::vector<at::Tensor> tensors{result};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    options.timeout = timeout_;
    auto work = launch(what, [&] { return group_->allreduce(tensors, options); });
    return std::make_unique<GlooWork>(std::move(work), tensor, result, timeout_, rank_, what, *monitor_);
  }

  void broadcast(at::Tensor& tensor, int root, const std::string& what) override {
    check_cpu_tensor(tensor, rank_, what);
    if (root < 0 || root >= world_size_) throw distributed_error(rank_, what, "has no rank " + std::to_string(root));
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    std::vector<at::Tensor> tensors{buffer};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = timeout_;
    wait_for_work(launch(what, [&] { return group_->broadcast(tensors, options); }), timeout_, rank_, what, *monitor_);
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  }

  void barrier(const std::string& what) override {
    c10d::BarrierOptions options;
    options.timeout = timeout_;
    wait_for_work(launch(what, [&] { return group_->barrier(options); }), timeout_, rank_, what, *monitor_);
  }

  void publish(const std::string& key, const std::string& value) override { signals_.publish(key, value); }
  std::string wait_for(const std::string& key, const std::string& what) override {
    return signals_.wait_for(key, what, *monitor_);
  }

  void finish() override { monitor_->finish(); }

  void abort(const std::string& reason) override {
    monitor_->report_failure(reason);
    aborted_ = true;
    group_->abort();
  }

 private:
  // On the monitor thread: the next collective throws the verdict (see the top of this file).
  void on_peer_lost(const std::string& message) {
    log::error(message + "; aborting communication");
    aborted_ = true;
  }

  template <typename Launch>
  c10::intrusive_ptr<c10d::Work> launch(const std::string& what, Launch&& launch_collective) {
    if (const auto loss = monitor_->peer_loss()) throw DistributedError(loss->message);
    if (aborted_) throw distributed_error(rank_, what, "was requested after the communicator was aborted");
    try {
      return launch_collective();
    } catch (const std::exception& e) {
      throw distributed_error(rank_, what, "could not be launched: " + first_line(e.what()));
    }
  }

  int rank_;
  int world_size_;
  Milliseconds timeout_;
  std::atomic<bool> aborted_{false};  // abort() may come from another thread
  StoreSignals signals_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  std::unique_ptr<PeerMonitor> monitor_;  // last, so destroyed first: its thread calls on_peer_lost
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const LaunchEnv& launch, const GlooDevices& devices,
                                                     const CommunicatorOptions& options) {
  return std::make_unique<GlooCommunicator>(store, launch.rank, launch.world_size, store_host_rank(launch),
                                            devices, timeout_from_seconds(options.timeout_seconds),
                                            options.peer_monitor);
}

}  // namespace finetune
