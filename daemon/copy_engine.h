// The copy engine: worker threads that move page bytes between tier slots and
// client buffers, off the frontend thread. A job is split into parts that run
// in parallel; the worker that finishes the last part runs the job's `finish`
// and pushes the reply frames to the frontend over an inproc socket, so the
// frontend only ever forwards completed replies. No job waits for another:
// a job that depends on one still running returns no frames and is answered
// by a job that dependency's completion submits (a PUT deduplicated against
// a PUT in flight), so correctness never rests on the queue's order — tests
// run the engine last-in-first-out to hold it to that.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "zmq.hpp"

namespace kvtier::daemon {

class CopyEngine {
 public:
  using Part = std::function<void()>;
  // Returns the multipart reply, routing-id frame first.
  using Finish = std::function<std::vector<zmq::message_t>()>;

  // Which queued task a free worker takes: the oldest (the daemon's), or
  // the newest (tests: a job must never depend on running after another).
  enum class Order : uint8_t { kFifo, kLifo };

  // Workers connect PUSH sockets to `completion_endpoint` (an inproc address
  // the frontend has already bound with PULL).
  static absl::StatusOr<std::unique_ptr<CopyEngine>> Create(zmq::context_t& ctx,
                                                            std::string completion_endpoint,
                                                            int threads,
                                                            Order order = Order::kFifo);
  ~CopyEngine();  // Shutdown()

  // Thread-safe, from any thread (a worker may submit the reply of a job
  // that was waiting on its own). `parts` may be empty (finish runs at once
  // on a worker). A `finish` that returns no frames sends nothing.
  void Submit(std::vector<Part> parts, Finish finish);
  // Runs every queued job to completion, then joins the workers.
  void Shutdown();
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  struct Job {
    std::vector<Part> parts;
    Finish finish;
    std::atomic<size_t> remaining{0};
  };
  struct Task {
    std::shared_ptr<Job> job;
    size_t part;  // index into job->parts; SIZE_MAX for "finish only"
  };

  CopyEngine(zmq::context_t& ctx, std::string endpoint, Order order)
      : ctx_(ctx), endpoint_(std::move(endpoint)), order_(order) {}
  void WorkerLoop();
  void Complete(Job& job, zmq::socket_t& push);

  zmq::context_t& ctx_;
  const std::string endpoint_;
  const Order order_;
  std::vector<std::thread> workers_;
  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

// The first error of a job whose parts run on several workers at once.
class FirstError {
 public:
  void Set(absl::Status st) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(st);
  }
  absl::Status Get() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// Splits n items of `item_bytes` into at most `max_parts` contiguous ranges of
// at least `min_part_bytes` each: [begin, end) pairs.
std::vector<std::pair<size_t, size_t>> SplitRanges(size_t n, uint64_t item_bytes, int max_parts,
                                                   uint64_t min_part_bytes = 512 << 10);

}  // namespace kvtier::daemon
