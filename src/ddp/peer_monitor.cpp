// PeerMonitor: heartbeats, error-exit and done keys in the rendezvous store (Note [Peer heartbeats],
// Note [Clean exit], Note [Abandoned monitor] in peer_monitor.h).
#include "finetune/ddp/peer_monitor.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "finetune/ddp/ddp_error.h"
#include "finetune/ddp/store_liveness.h"
#include "finetune/util/log.h"

namespace finetune {

using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

// --- HeartbeatTracker

HeartbeatTracker::HeartbeatTracker(int rank, int world_size, Milliseconds limit)
    : rank_(rank), limit_(limit), peers_(static_cast<size_t>(world_size)) {
  peers_.at(static_cast<size_t>(rank)).phase = Phase::Done;  // not a peer of itself
}

std::vector<int> HeartbeatTracker::unstarted() const {
  std::vector<int> ranks;
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].phase == Phase::Unstarted) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

std::vector<int> HeartbeatTracker::watched() const {
  std::vector<int> ranks;
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].phase == Phase::Watched) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

bool HeartbeatTracker::all_done() const {
  for (const auto& peer : peers_) {
    if (peer.phase != Phase::Done) return false;
  }
  return true;
}

void HeartbeatTracker::mark_started(int peer) {
  auto& p = peers_.at(static_cast<size_t>(peer));
  if (p.phase == Phase::Unstarted) p.phase = Phase::Watched;
}

void HeartbeatTracker::mark_done(int peer) { peers_.at(static_cast<size_t>(peer)).phase = Phase::Done; }

bool HeartbeatTracker::is_done(int peer) const { return peers_.at(static_cast<size_t>(peer)).phase == Phase::Done; }

std::optional<Milliseconds> HeartbeatTracker::observe(int peer, int64_t beats, Clock::time_point now) {
  auto& p = peers_.at(static_cast<size_t>(peer));
  if (p.phase != Phase::Watched) return std::nullopt;
  if (!p.beats || *p.beats != beats) {
    p.beats = beats;
    p.moved_at = now;
    return std::nullopt;
  }
  const auto quiet = std::chrono::duration_cast<Milliseconds>(now - p.moved_at);
  if (quiet > limit_) return quiet;
  return std::nullopt;
}

// --- the monitor thread

enum class MonitorRequest { Stop, Finish, Fail };

struct PeerMonitorState {
  // Set before the thread starts, then read-only.
  int rank = 0;
  int world_size = 1;
  std::optional<int> store_host;
  PeerMonitorOptions options;
  PeerMonitor::OnPeerLost on_lost;
  c10::intrusive_ptr<c10d::Store> store;       // the job's store: on the host, its object runs the server
  c10::intrusive_ptr<c10d::Store> connection;  // the monitor's own connection (used by the thread only)

  std::mutex mutex;
  std::condition_variable wake;
  // Guarded by mutex.
  std::optional<MonitorRequest> request;
  std::string failure_reason;
  std::optional<Clock::time_point> store_call_since;  // a store call is in progress
  std::optional<PeerMonitor::PeerLoss> verdict;
  bool watching = true;         // still beating and reading peers
  bool all_peers_done = false;  // every peer wrote done/<rank>
  bool exited = false;
  bool abandoned = false;  // Note [Abandoned monitor]
};

namespace {

constexpr const char* kExitsKey = "exits";  // bumped after each done/<rank> or failed/<rank>

std::string heartbeat_key(int rank) { return "heartbeat/" + std::to_string(rank); }
std::string done_key(int rank) { return "done/" + std::to_string(rank); }
std::string failed_key(int rank) { return "failed/" + std::to_string(rank); }

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }
int64_t counter_of(const std::vector<uint8_t>& bytes) { return std::stoll(text_of(bytes)); }

std::string seconds_one_decimal(Milliseconds duration) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1) << static_cast<double>(duration.count()) / 1000.0 << " s";
  return text.str();
}

// Thrown on the monitor thread when its owner has left it behind (Note [Abandoned monitor]).
struct Abandoned {};

// Every store call of the thread goes through here, so that the owner can tell a store that hangs
// from a thread that is merely busy.
template <typename Call>
void store_call(PeerMonitorState& state, Call&& call) {
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.store_call_since = Clock::now();
  }
  std::exception_ptr error;
  try {
    call(*state.connection);
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.store_call_since.reset();
    if (state.abandoned) throw Abandoned{};
  }
  if (error) std::rethrow_exception(error);
}

bool requested(PeerMonitorState& state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.request.has_value();
}

// One beat and one look at the peers; returns a verdict if a peer is lost.
std::optional<std::string> poll_peers(PeerMonitorState& state, HeartbeatTracker& tracker,
                                      std::optional<int64_t>& exits_seen) {
  store_call(state, [&](c10d::Store& store) { store.add(heartbeat_key(state.rank), 1); });
  if (!exits_seen) store_call(state, [&](c10d::Store& store) { store.add(kExitsKey, 0); });  // make it exist
  for (const int peer : tracker.unstarted()) {
    bool started = false;
    store_call(state, [&](c10d::Store& store) { started = store.check({heartbeat_key(peer)}); });
    if (started) tracker.mark_started(peer);
  }
  const std::vector<int> watched = tracker.watched();
  std::vector<std::string> keys{kExitsKey};
  for (const int peer : watched) keys.push_back(heartbeat_key(peer));
  std::vector<std::vector<uint8_t>> values;
  store_call(state, [&](c10d::Store& store) { values = store.multiGet(keys); });
  const auto now = Clock::now();

  // Exits first: a rank that failed is reported as failed, not as silent.
  const int64_t exits = counter_of(values.at(0));
  if (exits != exits_seen.value_or(0)) {
    for (int peer = 0; peer < state.world_size; ++peer) {
      if (tracker.is_done(peer)) continue;
      bool failed = false;
      bool done = false;
      std::string reason;
      store_call(state, [&](c10d::Store& store) {
        failed = store.check({failed_key(peer)});
        if (failed) {
          reason = text_of(store.get(failed_key(peer)));
        } else {
          done = store.check({done_key(peer)});
        }
      });
      if (failed) return "rank " + std::to_string(peer) + " exited with an error: " + reason;
      if (done) tracker.mark_done(peer);
    }
  }
  exits_seen = exits;

  for (size_t i = 0; i < watched.size(); ++i) {
    if (const auto quiet = tracker.observe(watched[i], counter_of(values.at(i + 1)), now)) {
      return "rank " + std::to_string(watched[i]) + " stopped sending heartbeats (last seen " +
             seconds_one_decimal(*quiet) + " ago)";
    }
  }
  return std::nullopt;
}

std::string store_loss(const PeerMonitorState& state, const std::exception& error) {
  const std::string cause = first_line(error.what());
  if (!state.store_host) return "the rendezvous store (torchrun's agent) is gone: " + cause;
  if (*state.store_host == state.rank) return "the rendezvous store this rank hosts failed: " + cause;
  return "rank " + std::to_string(*state.store_host) +
         " is gone (the rendezvous store it hosts dropped the connection: " + cause + ")";
}

// Reports a verdict, then gives the main thread exit_grace (counted from the verdict, however long
// the abort in on_lost takes) to act on it (Note [Peer heartbeats]).
void report_verdict(PeerMonitorState& state, const std::string& detail) {
  const auto deadline = Clock::now() + state.options.exit_grace;
  PeerMonitor::PeerLoss loss{detail, "rank " + std::to_string(state.rank) + ": " + detail};
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.verdict = loss;
  }
  state.wake.notify_all();
  try {
    if (state.on_lost) state.on_lost(loss.message);
  } catch (const std::exception& e) {
    log::error("rank " + std::to_string(state.rank) + ": aborting after a lost peer raised: " + e.what());
  }
  std::unique_lock<std::mutex> lock(state.mutex);
  const bool handled = state.wake.wait_until(lock, deadline, [&] { return state.request.has_value(); });
  if (handled) return;
  lock.unlock();
  state.options.terminate(loss.message);
}

// Beats and reads the peers until the owner asks for something or a peer is lost.
void watch_peers(PeerMonitorState& state, HeartbeatTracker& tracker) {
  std::optional<int64_t> exits_seen;
  while (!requested(state)) {
    std::optional<std::string> verdict;
    try {
      verdict = poll_peers(state, tracker, exits_seen);
    } catch (const Abandoned&) {
      throw;
    } catch (const std::exception& e) {
      if (requested(state)) return;
      // Note [Clean exit]: the host said it was done, so its store going away is expected.
      if (state.store_host && *state.store_host != state.rank && tracker.is_done(*state.store_host)) return;
      verdict = store_loss(state, e);
    }
    if (verdict) {
      report_verdict(state, *verdict);
      return;
    }
    std::unique_lock<std::mutex> lock(state.mutex);
    state.all_peers_done = tracker.all_done();
    state.wake.notify_all();
    state.wake.wait_for(lock, state.options.interval, [&] { return state.request.has_value(); });
  }
}

// Note [Clean exit], on the store host: keep the store up until every peer is done or failed (at
// most the limit), so that none of them takes the store's disappearance for this rank's death, and
// so that a failure of this rank reaches them as its reason rather than as a vanished store.
void wait_for_peers_to_leave(PeerMonitorState& state, bool warn) {
  std::vector<int> waiting;
  for (int peer = 0; peer < state.world_size; ++peer) {
    if (peer != state.rank) waiting.push_back(peer);
  }
  const auto deadline = Clock::now() + state.options.limit;
  while (true) {
    std::vector<int> still;
    for (const int peer : waiting) {
      bool left = false;
      store_call(state, [&](c10d::Store& store) {
        left = store.check({done_key(peer)}) || store.check({failed_key(peer)});
      });
      if (!left) still.push_back(peer);
    }
    waiting = std::move(still);
    if (waiting.empty()) return;
    if (Clock::now() >= deadline) {
      std::string ranks;
      for (const int peer : waiting) ranks += (ranks.empty() ? "" : ", ") + std::to_string(peer);
      if (warn) {
        log::warn("rank " + std::to_string(state.rank) + ": rank(s) " + ranks + " did not confirm their exit within " +
                  seconds_text(state.options.limit) + "; closing the rendezvous store anyway");
      }
      return;
    }
    std::this_thread::sleep_for(std::min<Milliseconds>(state.options.interval, Milliseconds(50)));
  }
}

void handle_request(PeerMonitorState& state) {
  MonitorRequest request;
  std::string reason;
  bool lost = false;
  {
    std::unique_lock<std::mutex> lock(state.mutex);
    state.watching = false;
    state.wake.notify_all();
    state.wake.wait(lock, [&] { return state.request.has_value(); });
    request = *state.request;
    reason = state.failure_reason;
    lost = state.verdict.has_value();
  }
  try {
    const bool host = state.store_host == state.rank;
    if (request == MonitorRequest::Fail) {
      store_call(state, [&](c10d::Store& store) {
        store.set(failed_key(state.rank), bytes_of(reason));
        store.add(kExitsKey, 1);
      });
      // After a lost peer the job is coming down anyway, and the lost one will never answer.
      if (host && !lost) wait_for_peers_to_leave(state, /*warn=*/false);
    } else if (request == MonitorRequest::Finish && !lost) {
      store_call(state, [&](c10d::Store& store) {
        store.set(done_key(state.rank), bytes_of("done"));
        store.add(kExitsKey, 1);
      });
      if (host) wait_for_peers_to_leave(state, /*warn=*/true);
    }
  } catch (const Abandoned&) {
    throw;
  } catch (const std::exception& e) {  // e.g. the store host is gone: nobody left to tell
    log::debug("rank " + std::to_string(state.rank) + ": could not tell the peers how this rank exits: " +
               first_line(e.what()));
  }
}

void run_monitor(const std::shared_ptr<PeerMonitorState>& shared) {
  PeerMonitorState& state = *shared;
  HeartbeatTracker tracker(state.rank, state.world_size, state.options.limit);
  try {
    watch_peers(state, tracker);
    handle_request(state);
  } catch (const Abandoned&) {
    return;  // the owner has gone on without this thread
  }
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.exited = true;
  }
  state.wake.notify_all();
}

// Asks the thread for `request` and waits for it to end, unless it is stuck in a store call
// (Note [Abandoned monitor]).
void stop_monitor(PeerMonitorState& state, std::thread& thread, MonitorRequest request, const std::string& reason) {
  if (!thread.joinable()) return;
  bool abandoned = false;
  {
    std::unique_lock<std::mutex> lock(state.mutex);
    if (!state.request) {
      state.request = request;
      state.failure_reason = reason;
    }
    state.wake.notify_all();
    while (!state.exited) {
      if (state.store_call_since && Clock::now() - *state.store_call_since > state.options.limit) {
        state.abandoned = abandoned = true;
        break;
      }
      state.wake.wait_for(lock, Milliseconds(10));
    }
  }
  if (!abandoned) {
    thread.join();
    return;
  }
  thread.detach();
  log::warn("rank " + std::to_string(state.rank) + ": the rendezvous store has not answered for " +
            seconds_text(state.options.limit) + "; leaving the peer monitor behind");
}

}  // namespace

// --- PeerMonitor

PeerMonitor::PeerMonitor(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                         std::optional<int> store_host, PeerMonitorOptions options, OnPeerLost on_lost)
    : state_(std::make_shared<PeerMonitorState>()) {
  if (world_size < 2 || rank < 0 || rank >= world_size) {
    throw Error("a peer monitor needs a rank of a world of 2 or more, got rank " + std::to_string(rank) + " of " +
                std::to_string(world_size));
  }
  state_->rank = rank;
  state_->world_size = world_size;
  state_->store_host = store_host;
  state_->options = std::move(options);
  if (!state_->options.terminate) {
    const Milliseconds grace = state_->options.exit_grace;
    state_->options.terminate = [grace](const std::string& message) {
      log_and_exit(message + " (the main thread did not stop within " + seconds_text(grace) +
                   "; terminating the process)");
    };
  }
  state_->on_lost = std::move(on_lost);
  state_->store = store;
  try {
    state_->connection = store->clone();
    // A store host that vanishes with its machine must fail our calls too: Note [Vanished store host].
    const auto bounded = bound_store_silence(*state_->connection, state_->options.limit);
    log::debug("rank " + std::to_string(rank) + ": " + std::to_string(bounded.size()) +
               " connection(s) to the rendezvous store give up after " + seconds_text(state_->options.limit) +
               " unacknowledged");
  } catch (const std::exception& e) {
    throw distributed_error(rank, "connecting the peer monitor to the rendezvous store",
                            "failed: " + first_line(e.what()));
  }
  thread_ = std::thread(run_monitor, state_);
}

PeerMonitor::~PeerMonitor() { stop_monitor(*state_, thread_, MonitorRequest::Stop, ""); }

void PeerMonitor::finish() { stop_monitor(*state_, thread_, MonitorRequest::Finish, ""); }

void PeerMonitor::report_failure(const std::string& reason) {
  stop_monitor(*state_, thread_, MonitorRequest::Fail, reason);
}

std::optional<PeerMonitor::PeerLoss> PeerMonitor::peer_loss() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->verdict;
}

std::optional<PeerMonitor::PeerLoss> PeerMonitor::wait_for_peer_loss() const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  const auto bound = state_->options.limit + 2 * state_->options.interval;
  state_->wake.wait_for(lock, bound, [&] {
    return state_->verdict.has_value() || !state_->watching || state_->all_peers_done;
  });
  return state_->verdict;
}

}  // namespace finetune
