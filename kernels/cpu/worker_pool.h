// Internal: the CPU kernels' worker threads. Created once, they block on a
// condition variable between launches (no spinning, unlike an OpenMP team
// under the default wait policy, which burned CPU that OpenBLAS and the other
// processes on a 2-core machine need), and a launch allocates nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace kvtier::kernels::internal {

class WorkerPool {
 public:
  // The process-wide pool: hardware_concurrency() threads (the caller counts
  // as one), or KVTIER_KERNEL_THREADS when set.
  static WorkerPool& Get();

  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return int(workers_.size()) + 1; }

  // Calls fn(slot, item) for every item in [0, n), spread dynamically over
  // up to max_threads threads including the caller; slot in [0, max_threads)
  // is unique among the threads running at once (per-thread scratch).
  // Returns when all items are done. Thread-safe: concurrent Runs take turns.
  void Run(int64_t n, int max_threads, absl::FunctionRef<void(int, int64_t)> fn);

 private:
  void WorkerLoop(int index);
  void Drain(int slot);

  absl::Mutex run_mu_;  // one Run at a time
  absl::Mutex mu_;
  absl::CondVar work_cv_;  // generation_ or stop_ changed
  absl::CondVar done_cv_;  // pending_ reached 0
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int wanted_ ABSL_GUARDED_BY(mu_) = 0;   // workers that join the current Run
  int pending_ ABSL_GUARDED_BY(mu_) = 0;  // workers of the current Run not yet finished
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The current job; written under mu_ before generation_ is bumped.
  const absl::FunctionRef<void(int, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::vector<std::thread> workers_;
};

}  // namespace kvtier::kernels::internal
