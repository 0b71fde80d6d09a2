// Internal to tiers/nvme: a tiny FIFO worker pool, the completion thread of
// the memory device and the workers of the thread-pool engine. std::mutex
// rather than absl::Mutex: ThreadSanitizer sees it even with the distro's
// uninstrumented Abseil (where an Await-based pool hung under TSan); wrapped
// in StdMutex so clang checks the lock annotations.
#pragma once

#include <cstdint>
#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kvtier/std_mutex.h"

namespace kvtier::tiers::nvme::internal {

class WorkerPool {
 public:
  explicit WorkerPool(uint32_t threads) {
    for (uint32_t i = 0; i < threads; ++i) workers_.emplace_back([this] { Run(); });
  }
  // Runs every task already posted, then joins the workers.
  ~WorkerPool() {
    {
      StdMutexLock lock(&mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Thread-safe; also from a task.
  void Post(std::function<void()> task) {
    {
      StdMutexLock lock(&mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        StdMutexLock lock(&mu_);
        mu_.Await(cv_, [this] {
          mu_.AssertHeld();
          return stopping_ || !tasks_.empty();
        });
        if (tasks_.empty()) return;  // stopping and drained
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  StdMutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvtier::tiers::nvme::internal
