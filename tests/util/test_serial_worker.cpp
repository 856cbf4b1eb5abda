// util/serial_worker.h: tasks run one at a time in submission order on one other thread, a task's
// exception reaches its future, and destruction runs what was submitted before it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "finetune/util/serial_worker.h"

namespace finetune {
namespace {

TEST(SerialWorker, RunsTasksInSubmissionOrderOnOneOtherThread) {
  std::vector<int> order;  // touched by the worker only, read after every future is ready
  std::vector<std::thread::id> threads;
  std::vector<std::shared_future<void>> done;
  {
    SerialWorker worker;
    for (int i = 0; i < 100; ++i) {
      done.push_back(worker.submit([&order, &threads, i] {
        if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the rest queue up meanwhile
        order.push_back(i);
        threads.push_back(std::this_thread::get_id());
      }));
    }
    for (auto& future : done) future.get();
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  for (const auto& id : threads) {
    EXPECT_EQ(id, threads.front());
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(SerialWorker, ATaskExceptionReachesItsFutureAndLaterTasksStillRun) {
  SerialWorker worker;
  auto failed = worker.submit([] { throw std::runtime_error("enqueue failed"); });
  std::atomic<bool> ran{false};
  auto later = worker.submit([&ran] { ran = true; });
  EXPECT_THROW(
      {
        try {
          failed.get();
        } catch (const std::runtime_error& error) {
          EXPECT_STREQ(error.what(), "enqueue failed");
          throw;
        }
      },
      std::runtime_error);
  later.get();
  EXPECT_TRUE(ran);
}

TEST(SerialWorker, DestructionRunsWhatWasSubmittedAndOnStartRunsFirst) {
  std::vector<int> order;
  {
    SerialWorker worker([&order] { order.push_back(-1); });
    for (int i = 0; i < 10; ++i) worker.submit([&order, i] { order.push_back(i); });
  }  // no future waited: the destructor runs all ten, then joins
  ASSERT_EQ(order.size(), 11u);
  EXPECT_EQ(order.front(), -1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(order[static_cast<size_t>(i + 1)], i);
}

}  // namespace
}  // namespace finetune
