// PageIndex: the store's sharded index of (namespace, page key) -> PageEntry
// and its recency lists. Each shard has its own mutex; callers lock a shard
// and use the *Locked helpers under it. Entries are kept compact because the
// daemon indexes millions of pages (target: under 200 bytes of RSS per page,
// map slot included; kvtier-scale-bench measures it at 10M pages).
//
// Victim choice must not cost more with more tenants, so each shard keeps,
// per tier, ONE recency list across namespaces (`tier list`) besides one list
// per namespace (for a namespace's own evictions: quotas, operators):
//  - a tier-wide pick (everyone's pressure: the evictor, PUTs and promotions
//    making room) scans the tier list's tail for the oldest leaf, whatever
//    the namespace count;
//  - a namespace with a reserve in the tier is kept out of that tier's tier
//    list: its pages are taken through its own list, which is cut where its
//    headroom ends (so the cost grows with the namespaces that hold a
//    reserve, never with the others, and protected pages are never walked);
//  - each shard publishes a lower bound of its oldest page's stamp per tier
//    (read without its lock; exact after each tier-wide pick there), so a
//    pick locks the shards that may hold the best victim, usually one.
// The rules every pick keeps (pinned and held pages never go, filters, leaf
// first, reserves) live in one place: the list scan in page_index.cc.
//
// The tier list's order is the tier's eviction policy (eviction_policy.h):
// under lru one list; under 2q the same links on one of two lists,
// probation (`all`) and protected (`prot`), a page's kProtected flag saying
// which, plus a ghost of fingerprints per shard and tier. Every list stays
// ordered by stamp, and a victim's rank is its stamp with protected pages
// ranked after every probation page (VictimRank), so the cross-shard pick
// and the oldest-page hints work unchanged. Namespace lists stay LRU, except
// under s3fifo, where a read marks a page instead of moving it (kAccessed).
// Under prefix a third list holds the chain ends (kChainEnd), and a victim's
// rank is its stamp plus its list's offset (PrefixRank): a pick merges the
// three tails by rank, and the hints are ranks the same way.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "kvtier/page_key.h"
#include "tiers/store/eviction_policy.h"
#include "tiers/store/internal/lru.h"
#include "tiers/store/internal/pointer_table.h"
#include "tiers/store/tier_manager.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

// One indexed page. Fields other than links/stamp/pins/flags/
// resident_children are fixed while the entry is pinned, so a PagePin reads
// them without the shard lock.
//
// 128 bytes, laid out for the cache: a LOOKUP's probe compares key and ns,
// reads tier and relinks the entry (stamp, both links), all in the first
// 64-byte line (EntryPool blocks are line-aligned); the rest is read when a
// page is pinned, moved or evicted. With ns on the second line, a probe at
// 10M pages cost two cache misses instead of one.
struct alignas(64) PageEntry {
  // First line: the probe and the recency relink.
  PageKey key;
  NamespaceId ns = 0;
  uint8_t tier = 0;  // index into the manager's tiers
  uint8_t flags = 0;
  // Pins that are holds (TierManager::HoldForLease): counted in `pins`, so
  // the page is never evicted, but they read nothing, so a promotion may
  // still move the page while they last.
  uint16_t holds = 0;
  uint64_t stamp = 0;              // global recency; larger is newer
  LruLinks<PageEntry> ns_links;    // its (tier, namespace) list; shard lock
  LruLinks<PageEntry> tier_links;  // its tier list (unless its namespace has a reserve there)
  // Second line.
  PageKey parent;
  Slot slot;    // slot.bytes is the page size
  Slot backup;  // write-through copy in the last tier (kHasBackup)
  uint64_t checksum = 0;
  uint32_t pins = 0;
  uint32_t resident_children = 0;  // children in the index that counted us

  static constexpr uint8_t kDetached = 1;         // out of the index; free on last unpin
  static constexpr uint8_t kCountedInParent = 2;  // bumped parent's resident_children
  static constexpr uint8_t kReused = 4;           // read or PUT again since stored
  static constexpr uint8_t kCorrupt = 8;          // failed its checksum; dropped
  // `backup` holds a durable copy in the last (persistent) tier: the page is
  // *clean* there and leaves a RAM tier without a write (inclusive NVMe).
  static constexpr uint8_t kHasBackup = 16;
  // On its tier's protected list (2q: reused since it entered the tier);
  // never set under lru or for a namespace with a reserve in the tier.
  static constexpr uint8_t kProtected = 32;
  // Fell back from its tier's protected list to probation (arc: its
  // eviction goes to the second ghost); cleared when protected again.
  static constexpr uint8_t kWasProtected = 64;
  // prefix: on its tier's chain-ends list (not reused, no child when it was
  // linked). The bit is arc's kWasProtected: a tier has one policy, and the
  // entry has no spare bit (both of its lines are full).
  static constexpr uint8_t kChainEnd = 64;
  // s3fifo: read or PUT again since it entered its FIFO (or was requeued);
  // eviction moves it on instead of taking it.
  static constexpr uint8_t kAccessed = 128;
  bool detached() const { return flags & kDetached; }
  bool clean() const { return flags & kHasBackup; }
};
static_assert(offsetof(PageEntry, tier_links) + sizeof(LruLinks<PageEntry>) <= 64,
              "the probe and relink fields share the entry's first cache line");
static_assert(sizeof(PageEntry) == 128, "two cache lines (EntryPool blocks)");

struct IndexKey {
  NamespaceId ns;
  const PageKey& key;
};

// The shard's table stores bare pointers (8 bytes a slot) and finds them by
// IndexKey, so the key is not stored twice.
struct EntryHash {
  size_t operator()(const IndexKey& k) const { return absl::HashOf(k.ns, k.key); }
  size_t operator()(const PageEntry* e) const { return absl::HashOf(e->ns, e->key); }
};
struct EntryEq {
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

// Where a page stands in eviction order across lists and shards (lower goes
// first): its stamp, with a 2q protected page after every probation page.
inline constexpr uint64_t kProtectedRank = uint64_t{1} << 63;
inline uint64_t VictimRank(const PageEntry* e) {
  return e->stamp | ((e->flags & PageEntry::kProtected) ? kProtectedRank : 0);
}
// Under prefix: the stamp for a chain end, plus `penalty` for a page PUT
// once, plus `bonus` more for a reused page (eviction_policy.h: ends rank
// `penalty` below their stamps; added to the others instead, ranks never
// fall below zero, which would tie every young chain end).
inline uint64_t PrefixRank(const PageEntry* e, uint64_t penalty, uint64_t bonus) {
  if (e->flags & PageEntry::kChainEnd) return e->stamp;
  if (e->flags & PageEntry::kProtected) return e->stamp + penalty + bonus;
  return e->stamp + penalty;
}

// An eviction candidate found in one shard.
struct Victim {
  PageEntry* entry = nullptr;
  uint64_t stamp = UINT64_MAX;  // VictimRank
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
// implements it over its per-namespace counters). Read once per namespace
// list, not per page: only namespaces with a reserve are asked, and their
// pages are scanned through their own lists.
class ReserveView {
 public:
  virtual ~ReserveView() = default;
  // Bytes of ns's pages that may still leave the tier; UINT64_MAX when ns
  // has no reserve there.
  virtual uint64_t Headroom(NamespaceId ns) const = 0;
};

// prefix's offsets for one tier, shared by the index's shards so that ranks
// compare across shards (a pick takes the least rank of all of them): a
// capacity of arrivals turned into stamps, measured over windows of about a
// capacity of arrivals by whichever shard closes the window. Read and
// written without a lock: the figures are estimates, and each shard copies
// them into its lists under its lock (IndexShard::RefreshOffsetsLocked).
struct RankClock {
  std::atomic<uint64_t> end_penalty{0};
  std::atomic<uint64_t> reuse_bonus{0};
  std::atomic<uint64_t> arrivals{0};
  std::atomic<uint64_t> window_end{64};   // `arrivals` at which the window closes
  std::atomic<uint64_t> window_start{0};  // `arrivals` when it opened
  std::atomic<uint64_t> window_stamp{0};  // and the newest stamp then
};

class IndexShard {
 public:
  static constexpr size_t kMaxTiers = 8;  // TierManager's limit

  // `clocks`: kMaxTiers clocks shared with the index's other shards (by
  // tier); none: this shard's own (a shard alone, in tests).
  explicit IndexShard(RankClock* clocks = nullptr, uint32_t shards = 1);
  absl::Mutex mu;

  PageEntry* FindLocked(NamespaceId ns, const PageKey& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A probe in two steps, for a caller that probes many keys (LOOKUP): the
  // key's table hash once, its bucket's load started a few keys ahead, then
  // FindLocked with the same hash.
  static uint64_t HashOf(NamespaceId ns, const PageKey& key) {
    return EntryHash()(IndexKey{ns, key});
  }
  void PrefetchLocked(uint64_t hash) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    map_.Prefetch(hash);
  }
  PageEntry* FindLocked(NamespaceId ns, const PageKey& key, uint64_t hash) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return map_.Find(IndexKey{ns, key}, hash);
  }
  // Inserts a new entry (key absent), stamps it and links it at the head of
  // its lists.
  void InsertLocked(PageEntry* e, uint64_t stamp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Removes from the map and its lists and marks it detached.
  void DetachLocked(PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Restamps a present entry and moves it to the head of its lists. `reused`:
  // the page is being read or PUT again (a GET's pin, a dedup), which under
  // 2q moves it to the protected list; other touches (a prefetch, a parent
  // after its child's commit) keep it in its own segment.
  void TouchLocked(PageEntry* e, uint64_t stamp, bool reused = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // TouchLocked with a stamp taken before this lock (TierManager::Lookup
  // takes one block of stamps for a whole chain): e goes below the pages
  // stamped since, so each list stays ordered by stamp. A no-op when e is
  // already newer (touched since by someone else).
  void RestampLocked(PageEntry* e, uint64_t stamp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Moves a present entry to `tier`'s lists with a fresh stamp. A move up (a
  // promotion: the page is being read) enters protected under 2q; a move
  // down is an eviction from the old tier (its ghost remembers the page) and
  // an arrival in the new one (probation, unless its ghost there knows it).
  // `slot` is its slot there.
  void MoveTierLocked(PageEntry* e, uint8_t tier, const Slot& slot, uint64_t stamp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // `e` is about to leave its tier by eviction (then DetachLocked): under 2q
  // a probation page leaves its fingerprint in the tier's ghost.
  void RememberEvictedLocked(const PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // prefix: a PUT claiming (ns, key) starts loading the ghost buckets its
  // insert will ask (InsertLocked, after the page's bytes are copied).
  void PrefetchGhostLocked(NamespaceId ns, const PageKey& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Whether e is on its tier's chain-ends list (prefix): a child naming it
  // as its parent moves it off (StoreCore::AttachToParent touches it).
  bool ChainEndLocked(const PageEntry* e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return (e->flags & PageEntry::kChainEnd) && e->tier < tiers_.size() &&
           Ranked(tiers_[e->tier].policy);
  }
  // prefix: this shard's offsets in `tier` now, in stamps (tests).
  std::pair<uint64_t, uint64_t> PrefixOffsetsLocked(uint8_t tier) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (tier >= tiers_.size()) return {0, 0};
    return {tiers_[tier].end_penalty, tiers_[tier].reuse_bonus};
  }
  // The tier's policy and, for 2q and arc, the bytes of this shard's
  // protected pages beyond which the oldest fall back to probation (arc:
  // where that limit starts; it then moves within [0, share_bytes], this
  // shard's share of the tier); set before the tier holds pages
  // (TierManager's constructor), fixed afterwards.
  void SetPolicyLocked(uint8_t tier, EvictionPolicy policy, uint64_t protected_cap,
                       uint64_t share_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // arc: this shard's protected limit in `tier` now (tests).
  uint64_t ProtectedCapLocked(uint8_t tier) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return tier < tiers_.size() ? tiers_[tier].prot_cap_bytes : 0;
  }
  // Namespace `ns` has a reserve in `tier`: its pages there stay out of the
  // tier list. Call before ns has pages (AddNamespace); fixed afterwards.
  void MarkReservedLocked(uint8_t tier, NamespaceId ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Best unpinned victim of `tier` in this shard: the oldest leaf found
  // within `scan_limit` eligible entries of a list's tail, else the oldest
  // eligible non-leaf there; scan_limit 0: the oldest eligible entry, as a
  // leaf. `ns` 0 scans the tier list and the lists of namespaces with a
  // reserve here; else only ns's own list. `filter` skips pages of the wrong
  // kind (they do not count against scan_limit). `reserves` set: a
  // namespace's pages are taken only while they fit its headroom; the first
  // that does not ends the scan of its list (a namespace's pages are nearly
  // always one size, and a long run of protected pages must not be walked
  // under the lock on every pick).
  // Under s3fifo a tier-wide pick first moves the marked pages it meets at
  // the tails on (RequeueAccessedLocked), so it is not const.
  Victim FindVictimLocked(uint8_t tier, NamespaceId ns, uint32_t scan_limit,
                          VictimFilter filter = VictimFilter::kAny,
                          const ReserveView* reserves = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // An unpinned clean page of `tier` among the `scan_limit` most recent of
  // its lists (backups of hot RAM pages are the NVMe tier's cheapest room).
  PageEntry* FindRecentCleanLocked(uint8_t tier, uint32_t scan_limit) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Pages of `tier` on its protected list, and fingerprints in its ghosts
  // (2q, arc).
  size_t ProtectedLocked(uint8_t tier) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  size_t GhostLocked(uint8_t tier) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // A lower bound of the VictimRank of every page of `tier` in this shard
  // (UINT64_MAX: none since the last tier-wide pick here), read without the
  // lock: a hint for choosing which shard to scan. Exact after a tier-wide
  // FindVictimLocked and after the first page leaves the tier (evicted,
  // deleted, moved); touching the first page leaves it low (a lower bound
  // still) instead of loading the page that is first now.
  uint64_t OldestStamp(uint8_t tier) const { return oldest_[tier].load(std::memory_order_relaxed); }

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
  using NsList = LruList<PageEntry, &PageEntry::ns_links>;
  using TierList = LruList<PageEntry, &PageEntry::tier_links>;
  // 2q's ghost: fingerprints of pages evicted from probation, oldest first
  // out (a ring over a set; 16 bytes an entry with the set's slot).
  struct Ghost {
    std::deque<uint64_t> order;
    absl::flat_hash_set<uint64_t> set;
    void Push(uint64_t f, size_t cap);
    bool Take(uint64_t f);  // true (and forgets it) when present
  };
  // prefix's ghost remembers four times as many pages as 2q's (2 capacities)
  // and is fed by every eviction; with Ghost's set and ring (two random
  // accesses and ~20 bytes an entry) the eviction rate at 1,000 namespaces
  // fell to 0.73x LRU's. This one is a table of cache-line buckets of 16
  // 4-byte tags, each bucket oldest-out on its own: one line an insert or a
  // lookup, 4 bytes an entry. An entry goes when its bucket has taken 16
  // newer ones: after its capacity of evictions, give or take a quarter
  // (buckets of 4 forgot too early too often: +2% of the Mooncake gap at 4k
  // pages instead of +8%). A false "seen" comes once in ~2^28 lookups.
  // Resized as the shard's pages grow or shrink by a factor of 2 or 4, it
  // starts empty again.
  struct alignas(64) GhostBucket {
    std::array<uint32_t, 16> tags{};
  };
  struct GhostTable {
    std::vector<GhostBucket> buckets;
    size_t entries = 0;
    void Push(uint64_t f, size_t cap);
    bool Take(uint64_t f);  // true (and forgets it) when present
    // Starts loading f's bucket: a PUT's insert asks the ghost (Take) and an
    // eviction feeds it (Push) a while after the key is first known (its
    // claim; its pick), each a cache miss otherwise.
    void Prefetch(uint64_t f) const;
  };
  // One tier's lists in this shard.
  struct TierLists {
    EvictionPolicy policy = EvictionPolicy::kLru;
    // Pages of namespaces without a reserve here: every one under lru, the
    // probation segment under 2q.
    TierList all;
    TierList prot;  // 2q's protected segment
    TierList ends;  // prefix: the chain ends
    // prefix: the offsets of ends and prot in stamps (PrefixRank): the
    // tier's RankClock's as of this shard's last refresh.
    uint64_t end_penalty = 0;
    uint64_t reuse_bonus = 0;
    size_t Pages() const { return all.size() + prot.size() + ends.size(); }
    uint64_t RankOf(const PageEntry* e) const {
      return Ranked(policy) ? PrefixRank(e, end_penalty, reuse_bonus) : VictimRank(e);
    }
    // A page of a namespace with a reserve here (on its own list only): its
    // stamp, under every policy. (Under prefix it so ranks as a chain end:
    // with an offset, a namespace's own pages in different shards compared
    // by offsets copied at different times, and beyond its reserve it lost
    // a scattering of pages instead of its oldest.)
    static uint64_t ReservedRankOf(const PageEntry* e) { return e->stamp; }
    // e's tier list (it is on one: its namespace has no reserve here).
    TierList& ListOf(const PageEntry* e) {
      if (e->flags & PageEntry::kProtected) return prot;
      if (Ranked(policy) && (e->flags & PageEntry::kChainEnd)) return ends;
      return all;
    }
    // 2q: bytes on the protected list, and their limit: this shard's share.
    // (One limit for all shards, over a shared counter, did no better in
    // kvtier-sim and put an atomic shared by every shard on each read.)
    uint64_t prot_bytes = 0;
    uint64_t prot_cap_bytes = UINT64_MAX;
    uint64_t share_bytes = UINT64_MAX;  // arc: the most prot_cap_bytes may grow to
    Ghost ghost;                        // evicted from probation without having been protected
    Ghost ghost_prot;                   // arc: evicted after falling back from protected
    GhostTable ghost_table;             // prefix: evicted unreused
    // The page a tier-wide pick looks at first: probation's tail, else
    // protected's (the oldest-page hint's page); under prefix the tail of
    // least rank.
    PageEntry* First() const;
    // 2q, arc: whether a ghost remembers `e` (a recent eviction from
    // probation); it forgets it then, and under arc moves the protected
    // limit (eviction_policy.h).
    bool Recall(const PageEntry* e);
    std::vector<NsList> by_ns;          // every page, by namespace; grown on demand
    std::vector<NamespaceId> reserved;  // namespaces with a reserve here
    std::vector<bool> is_reserved;      // by namespace
    bool Reserved(NamespaceId ns) const { return ns < is_reserved.size() && is_reserved[ns]; }
    NsList& ListFor(NamespaceId ns);
  };
  TierLists& Lists(uint8_t tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // s3fifo's CLOCK step: marked `d` (on main) loses its mark and goes to
  // main's head.
  void RequeueInMainLocked(TierLists& l, PageEntry* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Links e at the head of its lists / takes it out of them, keeping the
  // oldest-page hint of its tier. `protect`: on the protected list, if the
  // tier's policy has one (then overflowing protected pages fall back).
  void LinkLocked(PageEntry* e, bool protect = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Returns whether e was its tier's first page here (the hint's page): the
  // hint is then left a lower bound, for a caller to make exact.
  bool UnlinkLocked(PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void UpdateOldestLocked(uint8_t tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);  // exact again
  // prefix: page `e` arrived in its tier (a PUT, a move); at the end of a
  // window of arrivals the offsets are measured again (eviction_policy.h).
  void CountArrivalLocked(const PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // prefix: takes the tier's shared offsets into its lists (the hint exact
  // again when they moved).
  void RefreshOffsetsLocked(uint8_t tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void LowerOldestLocked(uint8_t tier, uint64_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // s3fifo: marked pages among small's oldest (until `window` unmarked ones
  // are passed) move to main; if small has fewer, marked pages at main's
  // tail are requeued at its head (each loses its mark).
  void RequeueAccessedLocked(uint8_t tier, uint32_t window) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  PointerTable<PageEntry, EntryHash, EntryEq> map_ ABSL_GUARDED_BY(mu);
  std::vector<TierLists> tiers_ ABSL_GUARDED_BY(mu);  // by tier; grown on demand
  // The largest stamp linked here: a requeued page's (s3fifo), so every
  // list stays in stamp order without a global stamp under the lock.
  uint64_t newest_stamp_ ABSL_GUARDED_BY(mu) = 0;
  // Written under mu (Update/LowerOldestLocked), read without it (OldestStamp).
  std::array<std::atomic<uint64_t>, kMaxTiers> oldest_;
  std::array<RankClock, kMaxTiers> own_clocks_;  // when the shard has no index
  RankClock* const clocks_;                      // by tier
  const uint32_t shards_;                        // sharing clocks_ (a capacity's share)
  absl::flat_hash_map<std::pair<NamespaceId, PageKey>, std::shared_ptr<KeyInFlight>> inflight_
      ABSL_GUARDED_BY(mu);
};

class PageIndex {
 public:
  explicit PageIndex(uint32_t shards);
  uint32_t num_shards() const { return static_cast<uint32_t>(shards_.size()); }
  IndexShard& shard(uint32_t i) { return *shards_[i]; }
  IndexShard& ShardFor(NamespaceId ns, const PageKey& key);
  // The index of ShardFor's shard (to group a chain's keys by shard).
  uint32_t ShardIndex(NamespaceId ns, const PageKey& key) const;
  // MarkReservedLocked in every shard.
  void MarkReserved(uint8_t tier, NamespaceId ns);
  // SetPolicyLocked in every shard, each shard's protected pages limited to
  // k2qProtectedShare of its share of `bytes` (the tier's low watermark:
  // what it holds once the evictor has run).
  void SetPolicy(uint8_t tier, EvictionPolicy policy, uint64_t bytes);

 private:
  std::array<RankClock, IndexShard::kMaxTiers> clocks_;  // prefix's, shared by the shards
  std::vector<std::unique_ptr<IndexShard>> shards_;
  uint32_t shard_bits_ = 0;
};

}  // namespace kvtier::tiers
