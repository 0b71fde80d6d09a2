// A job queue for the shared cache's worker threads. Each worker takes every
// job queued when it wakes (up to a batch of max_batch_bytes) and runs them
// as one batch, i.e. one pipeline per cluster node: jobs that arrive
// together (a GET's remote pages, a prefetch batch, a burst of PUTs) cost
// one round trip per node, not one each. Pipelined reads and write-through
// publishing, lookups (redis_shared_cache.cc) use it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvtier::tiers::shared_cache {

// Job: movable, with a `uint64_t bytes` member (its share of a batch).
template <typename Job>
class BatchQueue {
 public:
  // Runs one batch on worker `worker` (0 <= worker < workers), which owns
  // whatever it needs per worker (its cluster client). Must handle every job.
  using RunFn = std::function<void(size_t worker, std::vector<Job>& batch)>;

  // max_queued_bytes: Push refuses a job beyond it (0: no bound).
  BatchQueue(size_t workers, uint64_t max_batch_bytes, uint64_t max_queued_bytes, RunFn run)
      : max_batch_bytes_(max_batch_bytes), max_queued_bytes_(max_queued_bytes), run_(std::move(run)) {
    for (size_t w = 0; w < workers; ++w) threads_.emplace_back([this, w] { Work(w); });
  }
  // Runs what is still queued, then joins the workers.
  ~BatchQueue() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }
  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  // Queues `job`; false when max_queued_bytes are queued already: the job
  // is then left untouched with the caller (to answer it). Thread-safe.
  bool Push(Job&& job) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (max_queued_bytes_ != 0 && queued_bytes_ + job.bytes > max_queued_bytes_ && !jobs_.empty())
      return false;
    queued_bytes_ += job.bytes;
    jobs_.push_back(std::move(job));
    return true;
  }

  uint64_t queued_bytes() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return queued_bytes_;
  }

 private:
  void Work(size_t worker) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Job> batch;
    for (;;) {
      batch.clear();
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &BatchQueue::Ready));
        if (jobs_.empty()) return;  // stopping, and nothing left to run
        uint64_t bytes = 0;
        // At least one job; then as many as fit the batch.
        while (!jobs_.empty() && (batch.empty() || bytes + jobs_.front().bytes <= max_batch_bytes_)) {
          bytes += jobs_.front().bytes;
          batch.push_back(std::move(jobs_.front()));
          jobs_.pop_front();
        }
        queued_bytes_ -= bytes;
      }
      run_(worker, batch);
    }
  }
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !jobs_.empty(); }

  const uint64_t max_batch_bytes_, max_queued_bytes_;
  const RunFn run_;
  mutable absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started once the rest is built
};

}  // namespace kvtier::tiers::shared_cache
