// Internal to tiers/nvme: a tiny FIFO worker pool, the completion thread of
// the memory device and the workers of the thread-pool engine.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvtier::tiers::nvme::internal {

class WorkerPool {
 public:
  explicit WorkerPool(uint32_t threads) {
    for (uint32_t i = 0; i < threads; ++i) workers_.emplace_back([this] { Run(); });
  }
  // Runs every task already posted, then joins the workers.
  ~WorkerPool() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (auto& t : workers_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Thread-safe; also from a task.
  void Post(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
              return p->stopping_ || !p->tasks_.empty();
            },
            this));
        if (tasks_.empty()) return;  // stopping and drained
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvtier::tiers::nvme::internal
