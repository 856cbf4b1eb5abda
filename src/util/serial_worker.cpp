#include "finetune/util/serial_worker.h"

#include <utility>

namespace finetune {

SerialWorker::SerialWorker(std::function<void()> on_start)
    : thread_([this, on_start = std::move(on_start)] { run(on_start); }) {}

SerialWorker::~SerialWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

std::shared_future<void> SerialWorker::submit(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::shared_future<void> done = packaged.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(packaged));
  }
  wake_.notify_one();
  return done;
}

void SerialWorker::run(const std::function<void()>& on_start) {
  if (on_start) on_start();
  while (true) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and everything submitted has run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();  // an exception it throws goes to its future
  }
}

}  // namespace finetune
