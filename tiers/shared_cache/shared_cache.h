// SharedCache: the cache beside the store that every daemon of a fleet
// shares (a Redis Cluster). It is not a tier: its records belong to the
// cluster, never to a node, so nothing here has slots, owners or this node's
// byte accounting. The store publishes to it (NVMe evictions, write-through
// PUTs); the daemon asks it on LOOKUP misses (Contains), fetches from it into
// ordinary PUT reservations on GET (Fetch), and forgets a tenant's records
// on DELETE (Forget). Every call is asynchronous: no caller ever waits on the
// network, and a fault there (down, slow or hung node, forged or corrupt
// record) is a miss plus a counter, never a stall or wrong bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kvtier/page_key.h"

namespace kvtier::tiers {

struct SharedCacheCounters {
  uint64_t published = 0;        // records stored (PUT write-through, NVMe evictions)
  uint64_t publish_drops = 0;    // not stored: queue full, tenant unknown, node down
  uint64_t published_bytes = 0;  // page bytes of those stored
  uint64_t lookups = 0;          // Contains calls
  uint64_t lookup_keys = 0, lookup_hits = 0;
  uint64_t fetch_keys = 0, fetch_hits = 0;
  uint64_t fetch_misses = 0;     // absent
  uint64_t fetched_bytes = 0;    // page bytes opened and handed over
  uint64_t io_errors = 0;        // keys answered as misses because a node failed
  uint64_t rejected = 0;         // records not sealed by the tenant's key (forged, another's)
  uint64_t oversized = 0;        // records over the expected size, refused unread
  uint64_t malformed = 0;        // wrong size or format (corrupt, another layout)
  uint64_t forgotten = 0;        // records deleted by Forget
  uint64_t forget_errors = 0;    // keys Forget could not delete (node down)
  uint64_t node_down_events = 0; // cluster or node found unreachable (backoffs started)
  uint64_t down_nodes = 0;       // nodes in backoff now (a gauge)
  uint64_t frontend_io = 0;      // network batches on a no-network thread (a bug: always 0)
};

// One key's outcome of a Fetch.
struct FetchedPage {
  // OK: `bytes` holds the page (opened and authenticated). NotFound: not in
  // the cluster. DataLoss: a record that is not this tenant's page (forged,
  // sealed by another key, oversized, corrupt). Unavailable: its node is
  // down or hung. The caller treats every non-OK as a miss.
  absl::Status status;
  PageKey parent;  // the record's parent key (authenticated with it)
  std::unique_ptr<uint8_t[]> bytes;
};

class SharedCache {
 public:
  virtual ~SharedCache() = default;

  // Stores page `key` of namespace `ns` (n bytes at `bytes`, sealed with the
  // tenant's key and copied before the call returns) asynchronously. False
  // when it was not queued (queue full, unknown tenant, cache down): the
  // page simply is not shared. Thread-safe; never blocks on the network.
  virtual bool Publish(absl::string_view ns, const PageKey& key, const PageKey& parent,
                       const void* bytes, uint64_t n) = 0;

  // Which of `keys` of `ns` the cluster holds a record for (existence only:
  // a record is authenticated when fetched). `done(present)` runs once, on
  // one of the cache's threads, with present.size() == keys.size(); a key
  // whose node is down or hung is absent. Must not block.
  using ContainsDone = absl::AnyInvocable<void(std::vector<bool> present) &&>;
  virtual void Contains(absl::string_view ns, std::vector<PageKey> keys, ContainsDone done) = 0;

  // Fetches and opens the records of `keys` of `ns`, each expected to hold
  // exactly `page_bytes` page bytes (anything larger is refused before it
  // is read into memory). `done(pages)` runs once, on one of the cache's
  // threads, with pages.size() == keys.size(). Page i's bytes go to dst[i]
  // (room for page_bytes, valid until `done`; its contents are unspecified
  // unless page i is OK), or, where dst is empty or dst[i] null, into
  // FetchedPage::bytes. Opening straight into where a page goes (a store
  // slot) saves a copy and the first touch of fresh memory.
  using FetchDone = absl::AnyInvocable<void(std::vector<FetchedPage> pages) &&>;
  virtual void FetchInto(absl::string_view ns, std::vector<PageKey> keys, uint64_t page_bytes,
                         std::vector<uint8_t*> dst, FetchDone done) = 0;
  void Fetch(absl::string_view ns, std::vector<PageKey> keys, uint64_t page_bytes,
             FetchDone done) {
    FetchInto(ns, std::move(keys), page_bytes, {}, std::move(done));
  }

  // Deletes the records of `keys` of `ns` cluster-wide. `done(status,
  // forgotten)` runs once, on one of the cache's threads, after every
  // reachable node answered: OK when no key was left behind, Unavailable
  // naming how many keys could not be deleted (their nodes down).
  using ForgetDone = absl::AnyInvocable<void(absl::Status status, uint64_t forgotten) &&>;
  virtual void Forget(absl::string_view ns, std::vector<PageKey> keys, ForgetDone done) = 0;

  // Waits until every Publish queued so far was sent (tests, operator
  // flushes). Never call it on the frontend.
  virtual void Drain() = 0;

  // Answers every queued Contains, Fetch and Forget (their callbacks run),
  // answers later ones at once on the caller's thread (absent, not found,
  // Unavailable), and returns once no callback runs any more: what the
  // callbacks use may go after it. Publish goes on until destruction.
  virtual void Stop() = 0;

  virtual SharedCacheCounters counters() const = 0;
  // "redis-cluster 127.0.0.1:7000,..." for STATS and logs.
  virtual std::string backing() const = 0;
};

}  // namespace kvtier::tiers
