// The peer monitor's rule with a fake clock (HeartbeatTracker), then PeerMonitor threads of several
// "ranks" sharing one store: an in-process HashStore, or a real TCPStore whose host can go away.
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <mutex>
#include <regex>
#include <thread>

#include "finetune/ddp/peer_monitor.h"

namespace finetune {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(HeartbeatTracker, JudgesOnlyStartedPeersAndOnlyOnceTheyFallSilentForTheLimit) {
  HeartbeatTracker tracker(/*rank=*/1, /*world_size=*/4, /*limit=*/2500ms);
  EXPECT_EQ(tracker.unstarted(), (std::vector<int>{0, 2, 3}));
  EXPECT_TRUE(tracker.watched().empty());
  const auto t0 = Clock::time_point{} + 1h;  // the fake clock

  // Unstarted: never judged, however long.
  EXPECT_FALSE(tracker.observe(0, 1, t0));
  EXPECT_FALSE(tracker.observe(0, 1, t0 + 1h));

  tracker.mark_started(0);
  tracker.mark_started(2);
  EXPECT_EQ(tracker.watched(), (std::vector<int>{0, 2}));
  EXPECT_FALSE(tracker.observe(0, 5, t0));  // first read
  EXPECT_FALSE(tracker.observe(0, 5, t0 + 2500ms));  // exactly the limit: still alive
  const auto quiet = tracker.observe(0, 5, t0 + 2501ms);
  ASSERT_TRUE(quiet);
  EXPECT_EQ(quiet->count(), 2501);

  // A counter that moves resets the clock, however late it is read (a slow read is no verdict).
  EXPECT_FALSE(tracker.observe(2, 7, t0));
  EXPECT_FALSE(tracker.observe(2, 8, t0 + 10s));
  EXPECT_FALSE(tracker.observe(2, 8, t0 + 12s));
  EXPECT_TRUE(tracker.observe(2, 8, t0 + 13s));

  // Done: no longer judged.
  tracker.mark_done(2);
  EXPECT_FALSE(tracker.observe(2, 8, t0 + 1h));
  EXPECT_EQ(tracker.watched(), (std::vector<int>{0}));
  EXPECT_FALSE(tracker.all_done());
  tracker.mark_done(0);
  tracker.mark_done(3);
  EXPECT_TRUE(tracker.all_done());
  EXPECT_TRUE(tracker.is_done(1));  // a rank is not its own peer
}

// What the monitors of a test reported, in order, from their threads.
struct Reports {
  std::mutex mutex;
  std::vector<std::string> lost;        // on_lost messages
  std::vector<std::string> terminated;  // terminate messages
  std::optional<Clock::time_point> first_lost_at;

  PeerMonitor::OnPeerLost on_lost() {
    return [this](const std::string& message) {
      std::lock_guard<std::mutex> lock(mutex);
      lost.push_back(message);
      if (!first_lost_at) first_lost_at = Clock::now();
    };
  }
  std::vector<std::string> lost_messages() {
    std::lock_guard<std::mutex> lock(mutex);
    return lost;
  }
  std::vector<std::string> terminated_messages() {
    std::lock_guard<std::mutex> lock(mutex);
    return terminated;
  }
};

PeerMonitorOptions fast_options(Reports& reports, std::chrono::milliseconds exit_grace = 30s) {
  PeerMonitorOptions options;
  options.interval = 20ms;
  options.limit = 200ms;
  options.exit_grace = exit_grace;
  options.terminate = [&reports](const std::string& message) {
    std::lock_guard<std::mutex> lock(reports.mutex);
    reports.terminated.push_back(message);
  };
  return options;
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return predicate();
}

c10::intrusive_ptr<c10d::Store> hash_store() { return c10::make_intrusive<c10d::HashStore>(); }

std::unique_ptr<PeerMonitor> monitor(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                     Reports& reports, std::chrono::milliseconds exit_grace = 30s) {
  return std::make_unique<PeerMonitor>(store, rank, world_size, /*store_host=*/0, fast_options(reports, exit_grace),
                                       reports.on_lost());
}

TEST(PeerMonitor, SilentPeerIsReportedSoonAfterTheLimit) {
  auto store = hash_store();
  Reports reports;
  auto rank0 = monitor(store, 0, 3, reports);
  auto rank1 = monitor(store, 1, 3, reports);
  auto rank2 = monitor(store, 2, 3, reports);
  std::this_thread::sleep_for(300ms);  // longer than the limit: everybody alive, nobody reported
  EXPECT_TRUE(reports.lost_messages().empty());

  rank2.reset();  // stops beating without a word, as a killed process
  const auto silenced = Clock::now();
  ASSERT_TRUE(eventually([&] { return reports.lost_messages().size() == 2; }));
  const double elapsed = std::chrono::duration<double>(*reports.first_lost_at - silenced).count();
  EXPECT_GE(elapsed, 0.15);  // the limit (0.2 s) counts from the last beat seen, up to an interval before
  EXPECT_LT(elapsed, 1.0);   // limit + 2 intervals, plus generous scheduling noise
  const std::regex expected(R"(rank [01]: rank 2 stopped sending heartbeats \(last seen 0\.[2-9] s ago\))");
  for (const auto& message : reports.lost_messages()) EXPECT_TRUE(std::regex_match(message, expected)) << message;
  ASSERT_TRUE(rank0->peer_loss());
  EXPECT_EQ(rank0->peer_loss()->message, "rank 0: " + rank0->peer_loss()->detail);
  EXPECT_TRUE(reports.terminated_messages().empty());
}

TEST(PeerMonitor, ErrorExitIsReportedAtOnceWithItsReason) {
  auto store = hash_store();
  Reports reports;
  auto rank0 = monitor(store, 0, 2, reports);
  auto rank1 = monitor(store, 1, 2, reports);
  std::this_thread::sleep_for(60ms);
  const auto failed = Clock::now();
  rank1->report_failure("rank 1: CUDA out of memory in step 3");
  ASSERT_TRUE(eventually([&] { return !reports.lost_messages().empty(); }));
  EXPECT_LT(std::chrono::duration<double>(*reports.first_lost_at - failed).count(), 0.15);  // well before the limit
  EXPECT_EQ(reports.lost_messages(),
            std::vector<std::string>{"rank 0: rank 1 exited with an error: rank 1: CUDA out of memory in step 3"});
}

TEST(PeerMonitor, FinishedPeerIsNotReported) {
  auto store = hash_store();
  Reports reports;
  auto rank1 = monitor(store, 1, 3, reports);
  auto rank2 = monitor(store, 2, 3, reports);
  auto rank0 = monitor(store, 0, 3, reports);
  std::this_thread::sleep_for(60ms);
  rank1->finish();
  rank1.reset();
  std::this_thread::sleep_for(600ms);  // three limits after rank 1 stopped beating
  EXPECT_TRUE(reports.lost_messages().empty());
  EXPECT_FALSE(rank0->peer_loss());
  // The store host waits for the others' done keys: rank 2 says done a little later.
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    rank2->finish();
  });
  const auto started = Clock::now();
  rank0->finish();
  const double waited = seconds_since(started);
  late.join();
  EXPECT_GE(waited, 0.03);
  EXPECT_LT(waited, 0.19);  // returned on rank 2's done key, before the 0.2 s bound
  EXPECT_TRUE(reports.lost_messages().empty());
}

TEST(PeerMonitor, PeerThatNeverBeatIsLeftToTheRendezvousTimeout) {
  auto store = hash_store();
  Reports reports;
  auto rank0 = monitor(store, 0, 2, reports);  // rank 1 never starts
  std::this_thread::sleep_for(600ms);
  EXPECT_TRUE(reports.lost_messages().empty());
}

TEST(PeerMonitor, UnhandledVerdictEndsTheProcessAfterTheGrace) {
  auto store = hash_store();
  Reports reports;
  auto rank0 = monitor(store, 0, 2, reports, /*exit_grace=*/150ms);
  auto rank1 = monitor(store, 1, 2, reports);
  std::this_thread::sleep_for(60ms);
  rank1->report_failure("boom");
  ASSERT_TRUE(eventually([&] { return !reports.terminated_messages().empty(); }));
  EXPECT_GE(seconds_since(*reports.first_lost_at), 0.14);
  EXPECT_EQ(reports.terminated_messages(), std::vector<std::string>{"rank 0: rank 1 exited with an error: boom"});

  // Handled in time (the main thread raised the verdict and unwound): no termination.
  Reports handled;
  auto store2 = hash_store();
  auto a = monitor(store2, 0, 2, handled, /*exit_grace=*/300ms);
  auto b = monitor(store2, 1, 2, handled);
  std::this_thread::sleep_for(60ms);
  b->report_failure("boom");
  ASSERT_TRUE(eventually([&] { return a->peer_loss().has_value(); }));
  a->report_failure(a->peer_loss()->message);
  std::this_thread::sleep_for(400ms);
  EXPECT_TRUE(handled.terminated_messages().empty());
}

TEST(PeerMonitor, WaitForPeerLossEndsEarlyWhenNoVerdictCanCome) {
  auto store = hash_store();
  Reports reports;
  auto rank0 = monitor(store, 0, 2, reports);
  auto rank1 = monitor(store, 1, 2, reports);
  std::this_thread::sleep_for(60ms);
  rank1->finish();
  auto started = Clock::now();
  EXPECT_FALSE(rank0->wait_for_peer_loss());
  EXPECT_LT(seconds_since(started), 0.2);  // the bound would be limit + 2 intervals = 0.24 s

  rank0->finish();
  started = Clock::now();
  EXPECT_FALSE(rank0->wait_for_peer_loss());  // stopped watching: returns at once
  EXPECT_LT(seconds_since(started), 0.05);
}

// A TCPStore server (what rank 0 hosts) and a client of it.
struct TcpStores {
  c10::intrusive_ptr<c10d::Store> host;
  c10::intrusive_ptr<c10d::Store> client;
};

TcpStores tcp_stores() {
  c10d::TCPStoreOptions options;
  options.port = 0;  // any free port
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = 10s;
  auto host = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  options.port = host->getPort();
  options.isServer = false;
  auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  return {host, client};
}

TEST(PeerMonitor, StoreHostThatDiesIsReportedAtOnce) {
  auto stores = tcp_stores();
  Reports reports;
  auto rank0 = monitor(stores.host, 0, 2, reports);
  auto rank1 = monitor(stores.client, 1, 2, reports);
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(reports.lost_messages().empty());

  rank0.reset();  // rank 0 dies: its monitor stops and its server goes away
  stores.host.reset();
  const auto died = Clock::now();
  ASSERT_TRUE(eventually([&] { return !reports.lost_messages().empty(); }, 3000ms));
  EXPECT_LT(std::chrono::duration<double>(*reports.first_lost_at - died).count(), 0.15);  // not the heartbeat limit
  const auto message = reports.lost_messages().at(0);
  EXPECT_EQ(message.rfind("rank 1: rank 0 is gone (the rendezvous store it hosts dropped the connection: ", 0), 0u)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(PeerMonitor, StoreHostThatFinishedMayCloseItsStoreBeforeAPeerFinishes) {
  auto stores = tcp_stores();
  Reports reports;
  auto rank0 = monitor(stores.host, 0, 2, reports);
  auto rank1 = monitor(stores.client, 1, 2, reports);
  std::this_thread::sleep_for(100ms);

  // Rank 1 is slower than the host's wait for its done key (the 0.2 s limit).
  const auto started = Clock::now();
  rank0->finish();
  EXPECT_GE(seconds_since(started), 0.19);
  rank0.reset();
  stores.host.reset();  // the host exits: its store goes away while rank 1 still watches
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(reports.lost_messages().empty()) << reports.lost_messages().at(0);
  rank1->finish();  // nobody left to tell: returns anyway
  EXPECT_TRUE(reports.lost_messages().empty());
}

}  // namespace
}  // namespace finetune
