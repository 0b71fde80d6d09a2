// TierManager::Impl: state shared by tier_manager.cc (index operations),
// reservation.cc (PUT path, quotas) and eviction.cc (eviction, demotion, the
// evictor thread). Private to tiers/.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tiers/page_index.h"
#include "tiers/tier_manager.h"

namespace kvtier::tiers {

using Counter = std::atomic<uint64_t>;

struct NamespaceState {
  NamespaceState(std::string n, size_t tiers)
      : name(std::move(n)), quota(tiers, 0), tier_bytes(new Counter[tiers]()) {}
  const std::string name;
  std::vector<uint64_t> quota;            // per tier index; 0 = unlimited
  std::unique_ptr<Counter[]> tier_bytes;  // page bytes charged, incl. reservations
  Counter pages{0};
  Counter lookup_hits{0}, lookup_misses{0}, get_hits{0}, get_misses{0};
  Counter puts{0}, dedup_puts{0}, quota_evictions{0};
};

struct TierState {
  std::unique_ptr<Tier> tier;
  uint64_t high_bytes = 0;  // evictor starts above this
  uint64_t low_bytes = 0;   // and stops at this
  Counter pages{0}, pinned_pages{0}, hits{0}, misses{0}, evictions{0};
  Counter demotions{0}, promotions{0}, dropped{0}, admission_drops{0}, checksum_errors{0};
};

struct TierManager::Impl {
  static constexpr NamespaceId kMaxNamespaces = 4096;

  Impl(const TierManagerConfig& c, std::vector<std::unique_ptr<Tier>> t);
  ~Impl();

  NamespaceState* Ns(NamespaceId id) const {
    return id == 0 || id >= kMaxNamespaces ? nullptr : ns_table[id].load(std::memory_order_acquire);
  }
  uint64_t NextStamp() { return clock.fetch_add(1, std::memory_order_relaxed); }
  bool IsLastTier(size_t t) const { return t + 1 >= tiers.size(); }

  // Pins under the shard lock; Unpin returns true when the caller must free
  // the entry (it was detached and this was the last pin).
  void PinLocked(PageEntry* e);
  bool UnpinLocked(PageEntry* e);
  void Unpin(PageEntry* e);
  // Frees a detached, unpinned entry: slot, quota bytes and memory.
  void FreeEntry(PageEntry* e);
  // Takes an entry out of the index and the page counts.
  void DetachEntryLocked(IndexShard& shard, PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Adjusts the parent's resident-children count (leaf-first eviction).
  // Returns true when the parent was found and counted the child.
  bool AttachToParent(NamespaceId ns, const PageKey& parent);
  void DetachFromParent(NamespaceId ns, const PageKey& parent);
  void TouchKey(NamespaceId ns, const PageKey& key);
  // Persistent tiers: the record of e, and dropping a page read back corrupt.
  PageMeta MetaOf(const PageEntry* e) const;
  void DropCorrupt(PageEntry* e);
  // Whether a page leaving tier t may be written to tier t+1 (admission).
  bool Admit(const PageEntry* e, size_t t) const;

  // Quotas (reservation.cc).
  bool TryCharge(NamespaceState& ns, size_t t, uint64_t bytes);
  void Uncharge(NamespaceId ns, size_t t, uint64_t bytes);
  // Charges `bytes` to ns in tier t, first evicting ns's own pages there
  // when that is what it takes. False when the quota cannot be met.
  bool ChargeQuota(NamespaceId ns, size_t t, uint64_t bytes);
  absl::StatusOr<Slot> AllocateWithEviction(size_t t, uint64_t bytes, bool evict = true);
  // PUT steps: refresh a present key; charge and allocate in tier t; publish.
  bool Dedup(NamespaceId ns, const PageKey& key, const PageKey& parent);
  absl::StatusOr<Slot> ReserveIn(NamespaceId ns, size_t t, uint64_t bytes, bool evict = true);
  // PUTs never demote inline into a persistent tier: that would put disk
  // writes and fsyncs on the request path. Such a tier is filled by the
  // evictor thread; a PUT that finds no room above it lands in it directly.
  bool EvictsInline(size_t t) const {
    return IsLastTier(t) || !tiers[t + 1]->tier->persistent();
  }
  bool Commit(NamespaceId ns, const PageKey& key, const PageKey& parent, size_t t, const Slot& slot,
              uint64_t checksum, const Slot* backup);
  // Write-through: a slot for a PUT's durable copy in the last tier, if it
  // is persistent and has room.
  std::optional<Slot> ReserveBackup(NamespaceId ns, size_t t, uint64_t bytes);
  void FreeBackup(PageEntry* e);

  // Eviction (eviction.cc). `ns` 0 means any namespace. Returns pages that
  // left tier t (0 or 1).
  size_t EvictOne(size_t t, NamespaceId ns);
  size_t EvictTo(size_t t, uint64_t target);
  void KickEvictorIfHigh(size_t t);
  void KickEvictor(size_t t);
  void StartEvictor();
  void StopEvictor();

  const TierManagerConfig config;
  std::vector<std::unique_ptr<TierState>> tiers;
  // Where promote_on_get moves pages: the highest host-addressable tier (the
  // host tier, also when an HBM tier sits above it), else the top tier.
  size_t promote_to = 0;
  PageIndex index;
  Counter clock{1};

  mutable absl::Mutex ns_mu;
  absl::flat_hash_map<std::string, NamespaceId> ns_by_name ABSL_GUARDED_BY(ns_mu);
  std::vector<std::unique_ptr<NamespaceState>> ns_owned ABSL_GUARDED_BY(ns_mu);
  std::unique_ptr<std::atomic<NamespaceState*>[]> ns_table;

 private:
  size_t DropLocked(IndexShard& shard, PageEntry* e, size_t t) ABSL_UNLOCK_FUNCTION(shard.mu);
  // The next victim of tier t: dropped at once (*dropped) when it leaves the
  // store, else returned pinned once by us for demotion; nullptr when none.
  PageEntry* TakeVictim(size_t t, NamespaceId ns, bool* dropped);
  // Demoting e (pinned by us) one tier down: allocate and copy, then (for a
  // persistent lower tier, possibly batched) persist, then switch the entry
  // over, or drop it when the lower tier cannot take it.
  struct Demotion {
    PageEntry* e = nullptr;
    IndexShard* shard = nullptr;
    size_t from = 0;
    Slot old;
    absl::StatusOr<Slot> dst = absl::ResourceExhaustedError("over quota in lower tier");
    bool copied = false;
    bool persisted = false;
    bool reuses_backup = false;  // the page's write-through copy becomes it
    uint64_t checksum = 0;
    PageMeta meta;
  };
  Demotion PrepareDemotion(PageEntry* e, size_t t);
  // Returns pages that left tier t (0 or 1).
  size_t FinishDemotion(Demotion& d);
  // Up to max_pages, stopping once tier t would be at or below target bytes.
  size_t DemoteBatch(size_t t, size_t max_pages, uint64_t target);
  size_t AbandonDemotionLocked(IndexShard& shard, PageEntry* e, size_t t)
      ABSL_UNLOCK_FUNCTION(shard.mu);
  bool CopyBetweenTiers(size_t from, const Slot& src, size_t to, const Slot& dst);
  int PickVictimShard(size_t t, NamespaceId ns);
  uint32_t ScanLimit(size_t t) const;
  void EvictorLoop();

  absl::Mutex evictor_mu;
  absl::CondVar evictor_cv;
  bool evictor_kick ABSL_GUARDED_BY(evictor_mu) = false;
  bool evictor_stop ABSL_GUARDED_BY(evictor_mu) = false;
  std::atomic<bool> stopping{false};
  std::thread evictor;
};

}  // namespace kvtier::tiers
