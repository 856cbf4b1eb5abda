// One interface for the collectives the trainer needs, with three backends:
//   LocalCommunicator  world_size 1: every operation is the identity (no threads, no sockets)
//   GlooCommunicator   CPU tensors, through LibTorch's c10d ProcessGroupGloo
//   NcclCommunicator   CUDA tensors, through the NCCL C API on its own stream, ordered after the
//                      compute stream with CUDA events (no host synchronisation in the hot path)
// All are bootstrapped through a c10d TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it, or
// torchrun's agent does), or, for NCCL under MPI builds, an MPI broadcast of the unique id.
// A watchdog aborts the communicator and raises DistributedError naming the rank and operation
// when an operation makes no progress for `timeout_seconds` or NCCL reports an async error, so a
// stuck peer never hangs the job; a PeerMonitor (heartbeats through the store, peer_monitor.h)
// notices a peer that died or failed within seconds, whatever the timeout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/ddp/ddp_defaults.h"
#include "finetune/ddp/peer_monitor.h"
#include "finetune/launch/launch_env.h"

namespace finetune {

// Where on the device a collective's input is complete when that is earlier than everything the
// caller's stream has queued: on CUDA an event (cudaEvent_t) that a CUDA graph records while it
// replays, so that a gradient bucket's all-reduce starts midway through the replay of a backward
// (Note [Bucket all-reduces during a replay] in ddp/grad_reducer.h).
struct ReadyEvent {
  void* cuda_event = nullptr;
};

// A launched collective; wait() makes the current device stream wait for it (no host sync on CUDA;
// on CPU it blocks until done). Throws DistributedError on failure/timeout.
class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Sum over the ranks, in place. `what` names the operation in timeout / failure messages
  // (e.g. "grad bucket 3").
  virtual std::unique_ptr<CollectiveWork> all_reduce_async(at::Tensor& tensor, const std::string& what) = 0;
  void all_reduce(at::Tensor& tensor, const std::string& what) { all_reduce_async(tensor, what)->wait(); }
  // all_reduce_async, waiting on the device only for `ready` (recorded, or its graph launched,
  // before this call) instead of for the caller's stream. The NCCL and local backends; the others
  // throw (they have no device events).
  virtual std::unique_ptr<CollectiveWork> all_reduce_after(at::Tensor& tensor, const std::string& what,
                                                           const ReadyEvent& ready);
  virtual void broadcast(at::Tensor& tensor, int root, const std::string& what) = 0;
  virtual void barrier(const std::string& what) = 0;
  // After the last collective of a run that succeeded on this rank (the final barrier): tells the
  // peers that this rank leaves normally, so that its exit is not taken for a death (Note [Clean
  // exit] in peer_monitor.h). No collectives after it.
  virtual void finish() = 0;
  // Signals outside the collectives (store_signals.h): publish() sets `key` in the rendezvous
  // store; wait_for() blocks until a peer published it (at most the DDP timeout; a dead or failed
  // peer ends the wait at once) and returns its value. Ranks that do not wait need not call it, so
  // a rank-dependent choice of who publishes and who waits is safe here, unlike a collective.
  virtual void publish(const std::string& key, const std::string& value) = 0;
  virtual std::string wait_for(const std::string& key, const std::string& what) = 0;
  // On a fatal error of this rank: tells the peers (failed/<rank> = `reason`) so that they stop at
  // once instead of waiting for a timeout, and stops all outstanding communication.
  virtual void abort(const std::string& reason) = 0;
};

struct CommunicatorOptions {
  std::string backend = "auto";  // auto (nccl for CUDA, gloo for CPU)|nccl|gloo
  double timeout_seconds = kDefaultDdpTimeoutSeconds;
  PeerMonitorOptions peer_monitor;  // Note [Peer heartbeats]; tests shorten or observe it
};

std::unique_ptr<Communicator> make_communicator(const LaunchEnv& launch, const at::Device& device,
                                                const CommunicatorOptions& options);

}  // namespace finetune
