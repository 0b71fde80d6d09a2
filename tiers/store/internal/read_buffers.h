// Pieces the store's read operations share (page_reads.cc, layer_reads.cc):
// block-aligned bounce buffers that a copy worker keeps for its next read,
// and the scope that tells the prefetcher a demand read of a lower tier runs.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tiers/store/tier_manager.h"
#include "tiers/tier.h"

namespace kvtier::tiers::internal {

// Bounce buffers are block-aligned and whole blocks, so an O_DIRECT tier
// reads straight into them.
inline constexpr uint64_t kReadAlign = 4096;
inline uint64_t RoundUpToBlock(uint64_t n) { return (n + kReadAlign - 1) / kReadAlign * kReadAlign; }

struct FreeBytes {
  void operator()(uint8_t* p) const { std::free(p); }
};
struct Bounce {
  std::unique_ptr<uint8_t, FreeBytes> bytes;  // nullptr: out of memory
  uint64_t room = 0;
};

// A buffer of at least `room` bytes (a multiple of kReadAlign): one this
// thread kept, or a new one.
Bounce TakeBounce(uint64_t room);
// Keeps `b` for this thread's next read while its spare bytes stay under a
// bound (copy workers live long: the memory stays faulted in, and a fresh
// 1 MiB buffer costs 256 faults); frees it otherwise.
void GiveBounce(Bounce b);

// Tells the prefetcher, for as long as it lives, that a demand read of a
// lower tier runs (it holds back new promotions meanwhile).
class DemandScope {
 public:
  explicit DemandScope(DemandReadHook* hook) : hook_(hook) {
    if (hook_ != nullptr) hook_->BeginDemandRead();
  }
  ~DemandScope() {
    if (hook_ != nullptr) hook_->EndDemandRead();
  }
  DemandScope(const DemandScope&) = delete;
  DemandScope& operator=(const DemandScope&) = delete;

 private:
  DemandReadHook* hook_;
};

// Where a batch's asynchronous reads report: the tier's I/O threads only
// queue (id, status) under a lock never held around a ReadAsync call; the
// batch's own thread takes them in Wait and does the work.
class ReadCompletions {
 public:
  // The ReadDone of read `id`. It keeps the queue alive: the last callback
  // may still be leaving the lock when the batch is gone.
  Tier::ReadDone Done(size_t id) {
    return [q = queue_, id](absl::Status st) {
      absl::MutexLock lock(&q->mu);
      q->done.emplace_back(id, std::move(st));
      q->cv.Signal();
    };
  }
  // Blocks until at least one read completed; returns those that did.
  std::vector<std::pair<size_t, absl::Status>> Wait() {
    std::vector<std::pair<size_t, absl::Status>> out;
    Queue& q = *queue_;
    absl::MutexLock lock(&q.mu);
    while (q.done.empty()) q.cv.Wait(&q.mu);
    out.swap(q.done);
    return out;
  }

 private:
  struct Queue {
    absl::Mutex mu;
    absl::CondVar cv;
    std::vector<std::pair<size_t, absl::Status>> done ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
};

}  // namespace kvtier::tiers::internal
