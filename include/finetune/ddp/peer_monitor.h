// PeerMonitor: notices, through the rendezvous store, that another rank died or failed, so that a
// survivor stops within seconds instead of waiting out --ddp_timeout on a collective that can no
// longer finish. One background thread per rank of a multi-rank job, owned by the communicator.
//
// Note [Peer heartbeats]
// NCCL does not notice a dead peer on its own (within a node its kernels just spin until the
// watchdog's --ddp_timeout, 30 min by default). So every rank's monitor thread, on a store
// connection of its own (a blocking get on the main thread must not delay a beat),
//   - beats: every kHeartbeatInterval it adds 1 to the key "heartbeat/<rank>";
//   - watches: it reads the other ranks' counters (one multiGet); a counter that has not moved for
//     kHeartbeatLimit, measured on this monitor's clock between the reads where it saw it move,
//     is a dead rank: "rank 1 stopped sending heartbeats (last seen 2.6 s ago)". A rank is judged
//     only after its first beat was seen; one that never started is the rendezvous's business
//     (it fails after --ddp_timeout);
//   - reads error exits: a rank that fails writes "failed/<rank>" (its error) and bumps "exits"
//     (Communicator::abort), and its peers report "rank 1 exited with an error: ..." at their next
//     read, without waiting for the limit;
//   - notices the store host: rank 0 hosts the store (unless torchrun's agent does), so when rank 0
//     dies the next store call of every other rank fails: "rank 0 is gone (...)", at once; when
//     its whole machine vanishes (no FIN or RST ever comes), within kHeartbeatLimit of the first
//     unanswered request (Note [Vanished store host] in store_liveness.h).
// On a verdict the monitor calls `on_lost` (the communicator aborts: ncclCommAbort releases the
// stuck kernels) and the main thread raises the verdict at its next collective; if the main thread
// has not handled it within kPeerLossExitGrace (busy in a long step, or blocked in a transfer that
// the abort does not release) the monitor logs it and ends the process with status 1.
//
// The numbers. Beat every 0.25 s: a beat and a read per rank, about 10 small store requests a
// second per rank (the libuv store serves tens of thousands). Declare death after 2.5 s, ten
// missed beats (the usual heartbeat/timeout ratio, as Raft's election timeout): the beating thread
// does nothing but sleep and send one small request, so a 2.5 s gap takes a process frozen as a
// whole (SIGSTOP, heavy swapping: reported like a dead one) or a store host starved for seconds.
// Store latency under load does not by itself make a verdict: a slow read, or a monitor thread
// that was descheduled, next sees a counter that moved meanwhile. And the bound: the last beat of
// a rank is read within an interval, its absence judged within limit + 1 interval of that read,
// so a death is seen within 3 s; plus 1 s of grace for the main thread = 4 s, inside the 5 s we
// promise whatever --ddp_timeout.
//
// What stays with --ddp_timeout: a live peer whose main thread is stuck (hung kernel, deadlock,
// slow I/O) keeps beating, so stalls are still caught by the timeout alone; and a store host that
// is frozen (not dead) leaves store calls hanging, which is a stall too (Note [Abandoned monitor]).
//
// Note [Clean exit]
// A rank that finished must not look dead to a peer that is still finishing. After the final
// barrier every rank calls Communicator::finish: its monitor stops beating, writes "done/<rank>"
// and bumps "exits"; peers stop judging a rank that is done. The store host then waits (up to
// kHeartbeatLimit) until every peer is done or failed before its store may go away, and a monitor
// that loses the store after the host said done stops quietly. The host waits the same way after
// writing its own failed key (unless it lost a peer, which would never answer), so that its peers
// read the reason instead of finding the store gone.
//
// Note [Abandoned monitor]
// TCPStore calls have no timeout of their own (a frozen store host leaves them blocked), so the
// thread's state lives in a shared block: when a store call has been blocked for longer than
// kHeartbeatLimit, finish / report_failure / the destructor stop waiting, detach the thread and let
// the process exit; the thread, if its call ever returns, touches nothing but that block.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace finetune {

struct PeerMonitorState;  // shared with the monitor thread: Note [Abandoned monitor]

// Note [Peer heartbeats]: the one place for these timings.
inline constexpr std::chrono::milliseconds kHeartbeatInterval{250};
inline constexpr std::chrono::milliseconds kHeartbeatLimit{2500};
inline constexpr std::chrono::milliseconds kPeerLossExitGrace{1000};

struct PeerMonitorOptions {
  std::chrono::milliseconds interval = kHeartbeatInterval;
  std::chrono::milliseconds limit = kHeartbeatLimit;
  std::chrono::milliseconds exit_grace = kPeerLossExitGrace;
  // Called when the main thread did not handle a verdict within exit_grace; default: log, _Exit(1).
  std::function<void(const std::string& message)> terminate;
};

// The heartbeat rule of Note [Peer heartbeats] for one monitor, with the clock passed in (tests
// use a fake one). Peers are the ranks other than `rank`; each is unstarted (no beat seen yet, not
// judged), watched, or done (left normally, no longer judged).
class HeartbeatTracker {
 public:
  using Clock = std::chrono::steady_clock;

  HeartbeatTracker(int rank, int world_size, std::chrono::milliseconds limit);

  std::vector<int> unstarted() const;
  std::vector<int> watched() const;
  bool all_done() const;
  void mark_started(int peer);
  void mark_done(int peer);
  bool is_done(int peer) const;

  // Records the counter `beats` of a watched peer, read at `now`. Returns how long ago the counter
  // last moved when that is more than the limit (the peer is dead), otherwise nothing.
  std::optional<std::chrono::milliseconds> observe(int peer, int64_t beats, Clock::time_point now);

 private:
  enum class Phase { Unstarted, Watched, Done };
  struct Peer {
    Phase phase = Phase::Unstarted;
    std::optional<int64_t> beats;  // last value read
    Clock::time_point moved_at;    // when this monitor first read that value
  };
  int rank_;
  std::chrono::milliseconds limit_;
  std::vector<Peer> peers_;  // indexed by rank; peers_[rank_] unused
};

class PeerMonitor {
 public:
  // Receives "rank R: <verdict>"; runs on the monitor thread, once.
  using OnPeerLost = std::function<void(const std::string& message)>;

  // `store`: the job's rendezvous store (kept alive: rank 0's object hosts the server); the monitor
  // talks through a clone of it. `store_host`: the rank whose process hosts the store, none when
  // torchrun's agent does. Starts the thread (world_size > 1).
  PeerMonitor(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, std::optional<int> store_host,
              PeerMonitorOptions options, OnPeerLost on_lost);
  // Stops watching without telling the peers anything (as if this process had been killed).
  ~PeerMonitor();
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  // Note [Clean exit]: stops watching, writes done/<rank>; the store host also waits for its peers.
  void finish();
  // Stops watching and writes failed/<rank> = `reason`, so that the peers stop at once. The store
  // host, unless it lost a peer, waits (up to the limit) for them to leave, as in finish().
  void report_failure(const std::string& reason);

  struct PeerLoss {
    std::string detail;   // "rank 1 stopped sending heartbeats (last seen 2.6 s ago)"
    std::string message;  // "rank 0: " + detail
  };
  // The verdict, once there is one.
  std::optional<PeerLoss> peer_loss() const;
  // Waits for a verdict for as long as a dead peer can go unnoticed (limit + 2 intervals), and no
  // longer once none can come (every peer done, or the monitor stopped watching).
  std::optional<PeerLoss> wait_for_peer_loss() const;

 private:
  std::shared_ptr<PeerMonitorState> state_;
  std::thread thread_;
};

}  // namespace finetune
