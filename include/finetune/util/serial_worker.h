// One background thread that runs submitted tasks one at a time, in submission order.
//
// The NCCL communicator enqueues its collectives through one (Note [Enqueue off the caller's
// thread] in ddp/cuda/nccl_communicator.cpp): the order of the collectives stays the order of the
// calls, which every rank must share, while the calling thread (the autograd engine's, in a
// gradient hook) goes on at once.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace finetune {

class SerialWorker {
 public:
  // `on_start` runs first on the worker's thread (e.g. to select a CUDA device for it).
  explicit SerialWorker(std::function<void()> on_start = {});
  // Runs what was submitted before, then joins the thread.
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // The future becomes ready when `task` has run; it holds the exception the task threw, if any.
  std::shared_future<void> submit(std::function<void()> task);

 private:
  void run(const std::function<void()>& on_start);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace finetune
