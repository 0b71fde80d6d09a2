// MemorySharedCache: the in-memory twin of the shared cache (shared_cache.h)
// for tests and kvtier-sim. Records live in this process, one per (namespace,
// key), under an optional byte capacity dropped least recently used first, as
// a Redis Cluster with `maxmemory-policy allkeys-lru` drops values.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tiers/shared_cache/shared_cache.h"

namespace kvtier::tiers::shared_cache {

// Thread-safe (one mutex). Unlike the Redis cache, every callback runs
// synchronously on the caller's thread before the call returns, with no lock
// held (a callback may call the cache again): a single-threaded caller such
// as kvtier-sim's replay stays deterministic. Records are neither sealed
// nor per tenant: every namespace is known, and no record is ever refused.
class MemorySharedCache final : public SharedCache {
 public:
  // `capacity_bytes`: page bytes held at most, least recently used records
  // dropped first (a Publish or a Fetch hit makes a record the most recent;
  // Contains does not, as Redis's EXISTS does not); 0: unbounded.
  explicit MemorySharedCache(uint64_t capacity_bytes = 0) : capacity_bytes_(capacity_bytes) {}
  static std::unique_ptr<MemorySharedCache> Create(uint64_t capacity_bytes) {
    return std::make_unique<MemorySharedCache>(capacity_bytes);
  }

  // Stores a copy at once, replacing any record of the key (the newest copy
  // wins). False (a publish drop) for n == 0 or a page above the capacity.
  // Goes on after Stop(), as the interface asks.
  bool Publish(absl::string_view ns, const PageKey& key, const PageKey& parent, const void* bytes,
               uint64_t n) override ABSL_LOCKS_EXCLUDED(mu_);
  // After Stop(): every key absent.
  void Contains(absl::string_view ns, std::vector<PageKey> keys, ContainsDone done) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // NotFound for an absent key (and for every key after Stop()); DataLoss
  // for a record whose size is not `page_bytes` (counted in oversized when
  // larger, malformed when smaller).
  void FetchInto(absl::string_view ns, std::vector<PageKey> keys, uint64_t page_bytes,
                 std::vector<uint8_t*> dst, FetchDone done) override ABSL_LOCKS_EXCLUDED(mu_);
  // Always OK with the records deleted; Unavailable after Stop().
  void Forget(absl::string_view ns, std::vector<PageKey> keys, ForgetDone done) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // Nothing is ever queued.
  void Drain() override {}
  void Stop() override ABSL_LOCKS_EXCLUDED(mu_);

  SharedCacheCounters counters() const override ABSL_LOCKS_EXCLUDED(mu_);
  std::string backing() const override;

  // For tests and kvtier-sim's report.
  size_t records() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t used_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Records dropped to stay within the capacity (Redis's evicted_keys).
  uint64_t lru_drops() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  struct RecordId {
    std::string ns;
    PageKey key;
    friend bool operator==(const RecordId& a, const RecordId& b) {
      return a.key == b.key && a.ns == b.ns;
    }
    template <typename H>
    friend H AbslHashValue(H h, const RecordId& r) {
      return H::combine(std::move(h), r.ns, r.key);
    }
  };
  using Lru = std::list<RecordId>;  // front: most recently used
  struct Record {
    PageKey parent;
    std::vector<uint8_t> bytes;
    Lru::iterator lru;
  };

  void EraseLocked(absl::flat_hash_map<RecordId, Record>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<RecordId, Record> records_ ABSL_GUARDED_BY(mu_);
  Lru lru_ ABSL_GUARDED_BY(mu_);
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lru_drops_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  SharedCacheCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::tiers::shared_cache
