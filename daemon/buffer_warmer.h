// Warm-up of registered client buffers: right after REGISTER_BUFFER, a
// background thread maps the client's pages into the daemon's address space
// chunk by chunk, so the first GET into the buffer costs what later ones do
// instead of one page fault per page. Only pages the client already has are
// touched (never the holes of a sparse object), and the work is bounded per
// tenant (one chunk in flight, round-robin) and in total (threads x chunk).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/client_buffer.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::daemon {

struct BufferWarmerConfig {
  bool enabled = true;  // --buffer_warmup
  // Background threads; 0 runs none and the owner calls Step() (tests).
  int threads = 1;
  // Bytes warmed per step: a tenant holds at most this much work in flight,
  // and an UNREGISTER waits for at most one chunk to stop (the chunk keeps
  // the mapping alive; nobody waits for it).
  uint64_t chunk_bytes = 1ull << 20;
  // Nice value of the warm-up threads: warming is best effort and yields the
  // CPU to copies and the frontend.
  int nice = 10;
  // Test seams: skip madvise(MADV_POPULATE_WRITE) (as on kernels < 5.14),
  // and skip the residency check (so a test can make the touch fault).
  bool use_populate = true;
  bool check_residency = true;

  absl::Status Validate() const;
};

// Per-namespace figures (STATS NamespaceStats.warmup).
struct WarmStats {
  uint64_t pending_bytes = 0;  // registered bytes not yet warmed or skipped
  uint64_t warmed_bytes = 0;   // pages mapped in ahead of the first copy
  uint64_t skipped_bytes = 0;  // holes of the object, left alone
  uint64_t buffers = 0;        // registrations fully warmed
  uint64_t cancelled = 0;      // warm-ups stopped by UNREGISTER or session end
  uint64_t failed = 0;         // warm-ups stopped by a truncated object
};

class BufferWarmer {
 public:
  static absl::StatusOr<std::unique_ptr<BufferWarmer>> Create(const BufferWarmerConfig& config);
  ~BufferWarmer();  // stops the threads after their current chunk
  BufferWarmer(const BufferWarmer&) = delete;
  BufferWarmer& operator=(const BufferWarmer&) = delete;

  // Queues `buffer`'s host memory for warm-up on behalf of namespace `ns` and
  // returns at once (frontend thread). Device memory (CUDA IPC) needs none
  // and is ignored. Holds the buffer weakly: a registration that ends is
  // dropped at its next chunk.
  void Warm(tiers::NamespaceId ns, const std::shared_ptr<ClientBuffer>& buffer);
  // Stops warming `buffer` (UNREGISTER); a chunk in progress finishes.
  void Cancel(tiers::NamespaceId ns, const ClientBuffer* buffer);
  // The namespace's figures; first drops registrations that have ended.
  WarmStats Stats(tiers::NamespaceId ns);
  // Warms one chunk of the next tenant's oldest buffer; false when nothing
  // was queued. Thread-safe; the worker threads call it.
  bool Step();

 private:
  struct Job;
  struct Tenant {
    std::deque<std::shared_ptr<Job>> jobs;  // front: the one being warmed
    bool busy = false;     // a thread works on jobs.front()
    bool in_ring = false;  // listed in ready_
    WarmStats stats;
  };
  struct ChunkResult {
    uint64_t warmed = 0, skipped = 0;
    bool ok = true;
  };

  explicit BufferWarmer(const BufferWarmerConfig& config) : config_(config) {}
  void Loop();
  // Takes the next tenant with queued work, marks it busy, and returns its
  // oldest job with the offset to warm from.
  std::shared_ptr<Job> Take(tiers::NamespaceId* ns, uint64_t* begin);
  void Finish(tiers::NamespaceId ns, Job& job, uint64_t begin, const ChunkResult& r);
  ChunkResult WarmChunk(uint8_t* base, uint64_t begin, uint64_t end);
  bool Touch(uint8_t* begin, uint64_t bytes);
  void CancelJob(Tenant& t, size_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropEnded(Tenant& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Requeue(tiers::NamespaceId ns, Tenant& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BufferWarmerConfig config_;
  absl::Mutex mu_;
  absl::flat_hash_map<tiers::NamespaceId, Tenant> tenants_ ABSL_GUARDED_BY(mu_);
  // Tenants with queued work and no thread on it, served round-robin.
  std::deque<tiers::NamespaceId> ready_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::daemon
