// PageIndex: the store's sharded index of (namespace, page key) -> PageEntry
// and, per shard, one LRU list per (tier, namespace). Each shard has its own
// mutex; callers lock a shard and use the *Locked helpers under it. Entries
// are kept compact because the daemon indexes hundreds of thousands of pages
// (target: well under 200 bytes of RSS per page, map slot included).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "kvtier/page_key.h"
#include "tiers/lru.h"
#include "tiers/tier.h"
#include "tiers/tier_manager.h"

namespace kvtier::tiers {

// One indexed page. Fields other than prev/next/stamp/pins/flags/
// resident_children are fixed while the entry is pinned, so a PagePin reads
// them without the shard lock.
struct PageEntry {
  PageKey key;
  PageKey parent;
  PageEntry* prev = nullptr;  // LRU links, shard lock
  PageEntry* next = nullptr;
  uint64_t stamp = 0;  // global recency; larger is newer
  Slot slot;           // slot.bytes is the page size
  Slot backup;         // write-through copy in the last tier (kHasBackup)
  uint64_t checksum = 0;
  NamespaceId ns = 0;
  uint32_t pins = 0;
  uint32_t resident_children = 0;  // children in the index that counted us
  uint8_t tier = 0;                // index into the manager's tiers
  uint8_t flags = 0;
  // Pins that are holds (TierManager::HoldForLease): counted in `pins`, so
  // the page is never evicted, but they read nothing, so a promotion may
  // still move the page while they last.
  uint16_t holds = 0;

  static constexpr uint8_t kDetached = 1;         // out of the index; free on last unpin
  static constexpr uint8_t kCountedInParent = 2;  // bumped parent's resident_children
  static constexpr uint8_t kReused = 4;           // read or PUT again since stored
  static constexpr uint8_t kCorrupt = 8;          // failed its checksum; dropped
  // `backup` holds a durable copy in the last (persistent) tier: the page is
  // *clean* there and leaves a RAM tier without a write (inclusive NVMe).
  static constexpr uint8_t kHasBackup = 16;
  bool detached() const { return flags & kDetached; }
  bool clean() const { return flags & kHasBackup; }
};

struct IndexKey {
  NamespaceId ns;
  const PageKey& key;
};

// The hash set stores bare pointers (8 bytes a slot) and finds them by
// IndexKey through heterogeneous lookup, so the key is not stored twice.
struct EntryHash {
  using is_transparent = void;
  size_t operator()(const IndexKey& k) const { return absl::HashOf(k.ns, k.key); }
  size_t operator()(const PageEntry* e) const { return absl::HashOf(e->ns, e->key); }
};
struct EntryEq {
  using is_transparent = void;
  static IndexKey Of(const PageEntry* e) { return IndexKey{e->ns, e->key}; }
  static IndexKey Of(const IndexKey& k) { return k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    IndexKey x = Of(a), y = Of(b);
    return x.ns == y.ns && x.key == y.key;
  }
};

// Which unpinned pages a victim scan may return. kClean: pages with a
// durable copy below (they leave RAM without I/O: the frontend's eviction
// mode); kCleanOrUnreused adds pages never reused (the reused-only admission
// filter drops them, also without I/O). kDirty / kDirtyReused: the
// complements, the cleaner's work lists.
enum class VictimFilter : uint8_t { kAny, kClean, kCleanOrUnreused, kDirty, kDirtyReused };

// An eviction candidate found in one shard.
struct Victim {
  PageEntry* entry = nullptr;
  uint64_t stamp = UINT64_MAX;
  bool leaf = false;
  // Leaves first, then older.
  bool BetterThan(const Victim& o) const {
    if (entry == nullptr) return false;
    if (o.entry == nullptr) return true;
    if (leaf != o.leaf) return leaf;
    return stamp < o.stamp;
  }
};

// What a tier-wide eviction may take from each namespace in the tier being
// scanned without bringing it below its reserve there (the TierManager
// implements it over its per-namespace counters). Read once per LRU list,
// not per page: the lists are per (tier, namespace).
class ReserveView {
 public:
  virtual ~ReserveView() = default;
  // Bytes of ns's pages that may still leave the tier; UINT64_MAX when ns
  // has no reserve there.
  virtual uint64_t Headroom(NamespaceId ns) const = 0;
};

class IndexShard {
 public:
  absl::Mutex mu;

  PageEntry* FindLocked(NamespaceId ns, const PageKey& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Inserts a new entry (key absent), stamps it and links it at the head of
  // its (tier, ns) list.
  void InsertLocked(PageEntry* e, uint64_t stamp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Removes from the map and its list and marks it detached.
  void DetachLocked(PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Restamps a present entry and moves it to the head of its list.
  void TouchLocked(PageEntry* e, uint64_t stamp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Moves a present entry to `tier`'s list with a fresh stamp (demotion).
  void MoveTierLocked(PageEntry* e, uint8_t tier, uint64_t stamp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Best unpinned victim of `tier` in this shard: the oldest leaf found
  // within `scan_limit` entries of each list's tail, else the oldest
  // unpinned non-leaf; scan_limit 0: the oldest unpinned entry, as a leaf.
  // `ns` restricts the search to one namespace (0: all).
  // `filter` skips pages of the wrong kind (they do not count against
  // scan_limit's leaf window). `reserves` set: a namespace's pages are taken
  // only while they fit its headroom; the first that does not ends the scan
  // of its list (a namespace's pages are nearly always one size, and a long
  // run of protected pages must not be walked under the lock on every pick).
  Victim FindVictimLocked(uint8_t tier, NamespaceId ns, uint32_t scan_limit,
                          VictimFilter filter = VictimFilter::kAny,
                          const ReserveView* reserves = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // An unpinned clean page of `tier` among the `scan_limit` most recent of
  // each list (backups of hot RAM pages are the NVMe tier's cheapest room).
  PageEntry* FindRecentCleanLocked(uint8_t tier, uint32_t scan_limit) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The in-flight-put table (CacheLib's InFlightPuts): keys reserved by a PUT
  // and not yet published or released. A second reservation of such a key
  // is a dedup, so one key never has two slots or two durable records.
  // The slot of a claimed key's handle (null until a second PUT of the key
  // asks for one: the common, uncontended PUT allocates nothing), or nullptr
  // when no PUT holds the key.
  std::shared_ptr<KeyInFlight>* InFlightLocked(NamespaceId ns, const PageKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = inflight_.find(std::make_pair(ns, key));
    return it == inflight_.end() ? nullptr : &it->second;
  }
  void AddInFlightLocked(NamespaceId ns, const PageKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    inflight_.emplace(std::make_pair(ns, key), nullptr);
  }
  // Removes the key and returns its handle, if any PUT waits on it (to
  // resolve once unlocked).
  std::shared_ptr<KeyInFlight> RemoveInFlightLocked(NamespaceId ns, const PageKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto node = inflight_.extract(std::make_pair(ns, key));
    return node.empty() ? nullptr : std::move(node.mapped());
  }

  size_t SizeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return map_.size(); }
  // Takes every entry out (shutdown).
  std::vector<PageEntry*> DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

 private:
  using List = LruList<PageEntry>;
  List& ListFor(uint8_t tier, NamespaceId ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  static Victim ScanList(const List& list, uint32_t scan_limit, VictimFilter filter,
                         uint64_t headroom);

  absl::flat_hash_set<PageEntry*, EntryHash, EntryEq> map_ ABSL_GUARDED_BY(mu);
  // lists_[tier][ns]; grown on demand as namespaces appear.
  std::vector<std::vector<List>> lists_ ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::pair<NamespaceId, PageKey>, std::shared_ptr<KeyInFlight>> inflight_
      ABSL_GUARDED_BY(mu);
};

class PageIndex {
 public:
  explicit PageIndex(uint32_t shards);
  uint32_t num_shards() const { return static_cast<uint32_t>(shards_.size()); }
  IndexShard& shard(uint32_t i) { return *shards_[i]; }
  IndexShard& ShardFor(NamespaceId ns, const PageKey& key);

 private:
  std::vector<std::unique_ptr<IndexShard>> shards_;
  uint32_t shard_bits_ = 0;
};

}  // namespace kvtier::tiers
