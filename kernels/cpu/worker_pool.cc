// WorkerPool: condition-variable handoff of one job at a time; items are
// claimed with an atomic counter so uneven items (causal prefill blocks)
// balance across threads.
#include "cpu/worker_pool.h"

#include <algorithm>
#include <cstdlib>

namespace kvtier::kernels::internal {

WorkerPool& WorkerPool::Get() {
  static WorkerPool* pool = [] {
    int n = int(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("KVTIER_KERNEL_THREADS")) n = std::atoi(env);
    return new WorkerPool(std::clamp(n, 1, 256));
  }();
  return *pool;
}

WorkerPool::WorkerPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    work_cv_.SignalAll();
  }
  for (auto& t : workers_) t.join();
}

void WorkerPool::Drain(int slot) {
  for (int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(slot, i);
}

void WorkerPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      for (;;) {
        if (stop_) return;
        if (generation_ != seen) {
          seen = generation_;
          if (index < wanted_) break;  // else this Run does not need us
        }
        work_cv_.Wait(&mu_);
      }
    }
    Drain(index);
    absl::MutexLock l(&mu_);
    if (--pending_ == 0) done_cv_.Signal();
  }
}

void WorkerPool::Run(int64_t n, int max_threads, absl::FunctionRef<void(int, int64_t)> fn) {
  if (n <= 0) return;
  const int helpers = int(std::clamp<int64_t>(
      std::min<int64_t>({int64_t(max_threads) - 1, int64_t(workers_.size()), n - 1}), 0, 256));
  if (helpers == 0) {  // no handoff for a single item or a single thread
    for (int64_t i = 0; i < n; ++i) fn(0, i);
    return;
  }
  absl::MutexLock run(&run_mu_);
  {
    absl::MutexLock l(&mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    wanted_ = helpers + 1;  // worker indices 1..helpers join
    pending_ = helpers;
    ++generation_;
    work_cv_.SignalAll();
  }
  Drain(0);
  absl::MutexLock l(&mu_);
  while (pending_ > 0) done_cv_.Wait(&mu_);
  fn_ = nullptr;
}

}  // namespace kvtier::kernels::internal
