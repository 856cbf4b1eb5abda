#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "finetune/ddp/watchdog.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using namespace std::chrono_literals;

WatchdogOptions fast_options(std::function<void(const std::string&)> terminate) {
  WatchdogOptions options;
  options.timeout = 200ms;
  options.poll_interval = 10ms;
  options.exit_grace = 300ms;
  options.terminate = std::move(terminate);
  return options;
}

// Waits for `predicate` up to `limit`.
template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = 3000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return predicate();
}

TEST(Watchdog, StuckOperationTimesOutAbortsAndThrows) {
  std::atomic<int> aborts{0};
  std::atomic<int> terminations{0};
  Watchdog watchdog(3, fast_options([&](const std::string&) { ++terminations; }), nullptr, [&] { ++aborts; });
  watchdog.track("gradient all-reduce of bucket 1", [] { return false; });
  EXPECT_NO_THROW(watchdog.throw_if_failed());
  ASSERT_TRUE(eventually([&] { return watchdog.failed(); }));
  // The failure is published before the abort runs (the abort may be slow); it follows promptly.
  EXPECT_TRUE(eventually([&] { return aborts.load() == 1; }));
  try {
    watchdog.throw_if_failed();
    FAIL() << "expected DistributedError";
  } catch (const DistributedError& e) {
    EXPECT_STREQ(e.what(), "rank 3: gradient all-reduce of bucket 1 timed out after 0.2 s");
  }
  std::this_thread::sleep_for(500ms);  // past exit_grace: noticed, so no termination
  EXPECT_EQ(terminations.load(), 0);
  EXPECT_EQ(aborts.load(), 1);
}

TEST(Watchdog, CompletedOperationsNeverFail) {
  std::atomic<bool> done{false};
  Watchdog watchdog(0, fast_options([](const std::string&) {}), nullptr, [] {});
  watchdog.track("barrier", [&] { return done.load(); });
  std::this_thread::sleep_for(100ms);
  done = true;
  std::this_thread::sleep_for(300ms);  // longer than the timeout since track()
  EXPECT_FALSE(watchdog.failed());
  EXPECT_NO_THROW(watchdog.throw_if_failed());
}

TEST(Watchdog, AsyncErrorAbortsAndTerminatesWhenNobodyNotices) {
  std::atomic<bool> broken{false};
  std::atomic<int> aborts{0};
  std::string terminated_with;
  std::atomic<bool> terminated{false};
  Watchdog watchdog(
      1,
      fast_options([&](const std::string& message) {
        terminated_with = message;
        terminated = true;
      }),
      [&]() -> std::optional<std::string> {
        if (broken) return std::string("NCCL error: remote process exited");
        return std::nullopt;
      },
      [&] { ++aborts; });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(watchdog.failed());
  broken = true;
  ASSERT_TRUE(eventually([&] { return terminated.load(); }));
  EXPECT_EQ(terminated_with, "rank 1: NCCL error: remote process exited");
  EXPECT_EQ(aborts.load(), 1);
  EXPECT_THROW(watchdog.throw_if_failed(), DistributedError);
}

TEST(Watchdog, FailingProbeAndExplicitFailure) {
  Watchdog watchdog(2, fast_options([](const std::string&) {}), nullptr, [] {});
  watchdog.track("broadcast", []() -> bool { throw std::runtime_error("CUDA error: illegal address"); });
  ASSERT_TRUE(eventually([&] { return watchdog.failed(); }));
  try {
    watchdog.throw_if_failed();
    FAIL();
  } catch (const DistributedError& e) {
    EXPECT_STREQ(e.what(), "rank 2: broadcast failed: CUDA error: illegal address");
  }
  watchdog.fail("second failure is ignored");
  EXPECT_THROW(
      {
        try {
          watchdog.throw_if_failed();
        } catch (const DistributedError& e) {
          EXPECT_STRNE(e.what(), "second failure is ignored");
          throw;
        }
      },
      DistributedError);
}

}  // namespace
}  // namespace finetune
