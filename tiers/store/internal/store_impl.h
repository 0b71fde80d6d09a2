// TierManager::Impl: the store's state, shared by the files of tiers/store/
// that implement TierManager (docs/ARCHITECTURE.md has the map). Internal to
// tiers/store/: tests/arch/check_includes.py fails on an include from
// anywhere else in the product (the store's own tests may include it).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "tiers/store/internal/entry_pool.h"
#include "tiers/store/internal/page_index.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/store_state.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

struct TierManager::Impl {
  static constexpr NamespaceId kMaxNamespaces = 4096;

  Impl(const TierManagerConfig& c, std::vector<std::unique_ptr<Tier>> t);
  ~Impl();

  NamespaceState* Ns(NamespaceId id) const {
    return id == 0 || id >= kMaxNamespaces ? nullptr : ns_table[id].load(std::memory_order_acquire);
  }
  uint64_t NextStamp() { return clock.fetch_add(1, std::memory_order_relaxed); }
  // n consecutive stamps; returns the first (the oldest).
  uint64_t NextStamps(uint64_t n) { return clock.fetch_add(n, std::memory_order_relaxed); }
  bool IsLastTier(size_t t) const { return t + 1 >= tiers.size(); }
  // The tier holding RAM pages' durable copies (cleaning, write-through,
  // flushes, inclusive promotion): the first persistent tier (NVMe).
  // tiers.size() when there is none.
  size_t backup_tier = 0;
  bool IsBackupTier(size_t t) const { return t == backup_tier; }
  // The shared cache beside the store (Create's), fixed before the evictor starts.
  SharedCache* shared = nullptr;
  // Whether a page leaving the store from tier t (the last) in `mode` is
  // published to the shared cache first (shared_publish.cc).
  bool PublishesOnEviction(const PageEntry* e, size_t t, EvictMode mode) const;
  // Reads e (pinned once by the caller, no lock held) from tier t, checks
  // it, and hands a sealed copy to the shared cache. A page that fails its
  // checksum is not published (it is dropped anyway).
  void PublishLeaving(PageEntry* e, size_t t);

  // Pins under the shard lock; Unpin returns true when the caller must free
  // the entry (it was detached and this was the last pin).
  void PinLocked(PageEntry* e);
  bool UnpinLocked(PageEntry* e);
  void Unpin(PageEntry* e, bool hold = false);  // hold: the pin was a HoldForLease
  // Frees a detached, unpinned entry: slot, quota bytes and memory.
  void FreeEntry(PageEntry* e);
  // Takes an entry out of the index and the page counts.
  void DetachEntryLocked(IndexShard& shard, PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // The one place an entry changes tier (demotion, promotion, dropping a
  // clean RAM copy): moves its counts, pin and LRU position to tier `to`
  // with slot `slot`. `keep_backup` false drops the durable-copy flag (the
  // backup became the page itself, or the caller frees it).
  void SwitchTierLocked(IndexShard& shard, PageEntry* e, size_t to, const Slot& slot,
                        bool keep_backup) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Marks e clean with durable copy `backup`, or clears it; keeps the tier's
  // clean counters equal to its flagged entries.
  void SetBackupLocked(IndexShard& shard, PageEntry* e, const Slot& backup)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void ClearBackupLocked(IndexShard& shard, PageEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Frees a slot of tier t and its quota bytes; a persistent slot's record
  // goes first. On a thread that may not do disk I/O the record deletion
  // (and so the free) is queued for the evictor thread.
  void ReleaseSlot(size_t t, NamespaceId ns, const Slot& slot, const PageMeta& meta);
  // Frees a slot no record points at (never persisted, or its record is
  // gone) and its quota bytes.
  void FreeSlot(size_t t, NamespaceId ns, const Slot& slot);
  // Finishes queued ReleaseSlot work (evictor thread, and at shutdown).
  void DrainPendingUnpersist();
  // Adjusts the parent's resident-children count (leaf-first eviction).
  // Returns true when the parent was found and counted the child.
  bool AttachToParent(NamespaceId ns, const PageKey& parent);
  void DetachFromParent(NamespaceId ns, const PageKey& parent);
  void TouchKey(NamespaceId ns, const PageKey& key);
  // Persistent tiers: the record of e, and dropping a page read back corrupt.
  PageMeta MetaOf(const PageEntry* e) const;
  void DropCorrupt(PageEntry* e);
  // The checks of bytes read back from a persistent tier (ReadPage,
  // ReadPages, promotion), each a miss plus a counter, never wrong bytes:
  // DataLoss when e was already found corrupt (no second read is counted);
  // when `sum` (or the xxh3-64 of e's bytes read from tier t) is not e's
  // checksum, which counts the error and drops the page.
  absl::Status KnownCorrupt(PageEntry* e);
  // Counts bytes a caller moved into or out of tier t's slots through
  // Address() (TierState::direct_in/out).
  void CountIn(size_t t, uint64_t n) { tiers[t]->direct_in.fetch_add(n, std::memory_order_relaxed); }
  void CountOut(size_t t, uint64_t n) {
    tiers[t]->direct_out.fetch_add(n, std::memory_order_relaxed);
  }
  absl::Status VerifySum(PageEntry* e, size_t t, uint64_t sum);
  // Bytes of e read from tier t failed their check: counts it, drops the
  // page (a miss, never wrong bytes) and says so.
  absl::Status CorruptRead(PageEntry* e, size_t t);
  absl::Status VerifyRead(PageEntry* e, size_t t, const void* bytes);
  // Where a GET promotes the pages it reads under `o` (ReadPage, ReadPages,
  // ReadLayers); nullopt: it does not.
  std::optional<size_t> PromoteTarget(const ReadOptions& o) const {
    if (!o.promote || (!o.promote_only && !config.promote_on_get)) return std::nullopt;
    return o.promote_to >= 0 ? static_cast<size_t>(o.promote_to) : promote_to;
  }
  // Whether a page leaving tier t may be written to tier t+1 (admission).
  bool Admit(const PageEntry* e, size_t t) const;


  // Quotas and slots (slot_charge.cc); the PUT claim and commit
  // (put_reservations.cc).
  bool TryCharge(NamespaceState& ns, size_t t, uint64_t bytes);
  void Uncharge(NamespaceId ns, size_t t, uint64_t bytes);
  // Charges `bytes` to ns in tier t, first evicting ns's own pages there
  // (as `mode` allows) when that is what it takes. False when the quota
  // cannot be met.
  bool ChargeQuota(NamespaceId ns, size_t t, uint64_t bytes, EvictMode mode);
  absl::StatusOr<Slot> AllocateWithEviction(size_t t, uint64_t bytes, EvictMode mode);
  // Charge, then allocate, in tier t; uncharges again on failure.
  absl::StatusOr<Slot> ChargeAndAllocate(NamespaceId ns, size_t t, uint64_t bytes, EvictMode mode);
  // PUT steps: under the key's shard lock, dedup against a present key or
  // a PUT of it in flight, else enter the key in the in-flight table.
  enum class Claim { kClaimed, kPresent, kInFlight };
  // kInFlight: *other is the claiming PUT's handle.
  Claim ClaimKey(NamespaceId ns, const PageKey& key, std::shared_ptr<KeyInFlight>* other);
  void ReleaseClaim(NamespaceId ns, const PageKey& key);
  absl::StatusOr<Slot> ReserveIn(NamespaceId ns, size_t t, uint64_t bytes);
  // Publishes a reserved page (the key is claimed by the caller, so no
  // entry for it can exist) and releases the claim.
  void Commit(NamespaceId ns, const PageKey& key, const PageKey& parent, size_t t, const Slot& slot,
              uint64_t checksum, const Slot* backup);
  // Write-through: a slot for a PUT's durable copy in the last tier, if it
  // is persistent. NotFound when there is no such tier (the page needs no
  // copy); ResourceExhausted when it has no room (the PUT fails: its reply
  // would promise durability it does not have).
  absl::StatusOr<std::optional<Slot>> ReserveBackup(NamespaceId ns, size_t t, uint64_t bytes);
  void FreeBackup(PageEntry* e);
  bool HasBackupTier() const { return backup_tier < tiers.size(); }

  // Reserves (tenant_reserves.cc). No other namespace's pressure takes a
  // namespace's bytes in a tier below its reserve there: tier-wide victim
  // picks see each namespace's headroom (ReserveView) and claim the bytes
  // of the page they take until it has left the tier (or stayed).
  // Refuses reserves that exceed the tier, the namespace's quota, or leave
  // the others too little of the tier (max_reserved_fraction).
  absl::Status ValidateReserves(const NamespaceConfig& nc, const NamespaceState& ns) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ns_mu);
  // Bytes of ns's pages that may still leave tier t (UINT64_MAX: no reserve).
  uint64_t ReserveHeadroom(NamespaceId ns, size_t t) const;
  // Claims `bytes` of ns's headroom in t; false when they do not fit.
  bool ClaimAboveReserve(NamespaceId ns, size_t t, uint64_t bytes);
  // Gives a claim back once the page's bytes are uncharged from t (or the
  // page stayed there).
  void ReleaseReserveClaim(NamespaceId ns, size_t t, uint64_t bytes);

  // Eviction (eviction.cc). `ns` 0 means any namespace. Returns pages that
  // left tier t (0 or 1).
  size_t EvictOne(size_t t, NamespaceId ns, EvictMode mode);
  size_t EvictTo(size_t t, uint64_t target);
  // Cleaning (cleaner.cc): writes the coldest dirty pages of RAM tier t to
  // the persistent tier in one batch (one sync) and marks them clean, until
  // tier t holds clean_bytes of clean pages (or ns's share of its quota).
  size_t CleanTier(size_t t, NamespaceId ns, uint64_t want_clean_bytes);
  // Makes room in the persistent last tier by forgetting backups of RAM
  // pages first (write-back only); returns bytes freed.
  uint64_t ReclaimBackups(uint64_t want_bytes);
  void RequestClean(NamespaceId ns, size_t t);
  bool CleanRequested();  // runs the namespaces' requests; true on progress
  void KickEvictorIfHigh(size_t t);
  void KickEvictor(size_t t);
  void StartEvictor();
  void StopEvictor();

  const TierManagerConfig config;
  std::vector<std::unique_ptr<TierState>> tiers;
  // Where promote_on_get moves pages: the highest host-addressable tier (the
  // host tier, also when an HBM tier sits above it), else the top tier.
  size_t promote_to = 0;
  // The entries' memory; declared before the index, so it outlives what
  // the index points at.
  EntryPool entries;
  PageIndex index;
  Counter clock{1};

  mutable absl::Mutex ns_mu;
  absl::flat_hash_map<std::string, NamespaceId> ns_by_name ABSL_GUARDED_BY(ns_mu);
  std::vector<std::unique_ptr<NamespaceState>> ns_owned ABSL_GUARDED_BY(ns_mu);
  std::unique_ptr<std::atomic<NamespaceState*>[]> ns_table;

 private:
  size_t DropAndUnlock(IndexShard& shard, PageEntry* e, size_t t) ABSL_UNLOCK_FUNCTION(shard.mu);
  // What TakeVictim chose.
  struct Taken {
    PageEntry* entry = nullptr;  // pinned once by us, for demotion; else nullptr
    bool dropped = false;        // the victim left the store at once
    bool publish = false;        // entry leaves the store once published (shared cache)
    bool claimed = false;        // entry's bytes hold a reserve claim in its tier
  };
  // The next victim of tier t: dropped at once when it leaves the store,
  // else returned for demotion. `ns` 0 (a tier-wide pick: everyone's
  // pressure) respects every namespace's reserve; a namespace's own pick
  // (its quota, an operator's eviction of it) may go below its reserve.
  Taken TakeVictim(size_t t, NamespaceId ns, EvictMode mode);
  // A victim TakeVictim pinned for publishing: publishes it, then drops it
  // unless someone else pinned it meanwhile (it stays). True when dropped.
  bool PublishAndDrop(const Taken& v, size_t t);
  // Which pages of tier t `mode` may evict; nullopt: none (kCleanOnly never
  // evicts from a persistent tier: that deletes records).
  std::optional<VictimFilter> FilterFor(size_t t, EvictMode mode) const;
  // The page-move primitive (page_move.cc), under demotion, promotion and
  // cleaning: BeginMove charges the target tier, allocates there (making
  // room as `mode` allows), copies the bytes and takes their checksum when
  // they leave or come back from a persistent tier; the caller then
  // persists (batched: one sync for many moves) when the target is
  // persistent; FinishMove switches the entry over and uncharges the source,
  // or undoes everything. The mover holds a pin on e throughout.
 public:
  using MoveKind = ::kvtier::tiers::MoveKind;  // internal/page_move.h
  using PageMove = ::kvtier::tiers::PageMove;
  PageMove BeginMove(PageEntry* e, size_t to, MoveKind kind, EvictMode mode);
  // BeginMove in two halves around the copy, for a caller that copies
  // asynchronously (ReadPages): the move and its target slot (charged and
  // allocated), then the check of the bytes it copied (`sum` is their
  // xxh3-64; a corrupt page is dropped and the move marked so).
  PageMove PrepareMove(PageEntry* e, size_t to, MoveKind kind, EvictMode mode);
  void CheckMovedBytes(PageMove& m, uint64_t sum);
  // PromoteTo in two halves around the move: why e (pinned once by the
  // caller) cannot be promoted to tier `to` now, or nullopt when it can;
  // and the switch of a promotion whose bytes are in place (or its undo).
  std::optional<PromoteOutcome> CheckPromotable(PageEntry* e, size_t to);
  PromoteOutcome FinishPromotion(PageMove& m);
  // Persists every move of `moves` that needs it with one PersistBatch.
  void PersistMoves(std::vector<PageMove>& moves);
  // Returns true when the move took effect (or, for a demotion, when the
  // page left the tier anyway: deleted meanwhile, or given up). Does not
  // drop the mover's pin for kPromote (the caller's pin moves with the
  // page); drops it otherwise. One commit per kind of move, over one undo.
  bool FinishMove(PageMove& m);
 private:
  // FinishMove's parts, each entered with m.shard->mu held and leaving it
  // released: whether the move may still take effect, the switch of each
  // kind, and the undo that gives the target slot back.
  bool MoveStillValidLocked(const PageMove& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.shard->mu);
  void CommitDemotionAndUnlock(PageMove& m) ABSL_UNLOCK_FUNCTION(m.shard->mu);
  void CommitPromotionAndUnlock(PageMove& m) ABSL_UNLOCK_FUNCTION(m.shard->mu);
  void CommitCleanAndUnlock(PageMove& m) ABSL_UNLOCK_FUNCTION(m.shard->mu);
  bool UndoMoveAndUnlock(PageMove& m) ABSL_UNLOCK_FUNCTION(m.shard->mu);
  class TierReserves;  // ReserveView over ReserveHeadroom (eviction.cc)
  // A demotion of a victim TakeVictim picked: BeginMove, noting its claim.
  PageMove BeginEviction(const Taken& v, size_t t, EvictMode mode);
  // FinishMove, then the pick's reserve claim (its bytes have left the
  // tier, or it stayed).
  bool FinishEviction(PageMove& m);
  // Up to max_pages, stopping once tier t would be at or below target bytes.
  size_t DemoteBatch(size_t t, size_t max_pages, uint64_t target, EvictMode mode);
  size_t AbandonDemotionAndUnlock(IndexShard& shard, PageEntry* e, size_t t)
      ABSL_UNLOCK_FUNCTION(shard.mu);
 public:
  // Copies a page between tiers; with `sum`, also its xxh3-64.
  bool CopyBetweenTiers(size_t from, const Slot& src, size_t to, const Slot& dst,
                        uint64_t* sum = nullptr);
 private:
  // The shard holding tier t's best victim (-1: none), leaves first, then
  // oldest. Tier-wide (ns 0): shards are scanned oldest page first until
  // none left can hold an older leaf; a namespace's own pick scans all.
  int PickVictimShard(size_t t, NamespaceId ns, VictimFilter filter,
                      const ReserveView* reserves = nullptr);
  // Scans every shard: the best victim of all, leaves first, then oldest.
  int BestVictimShard(size_t t, NamespaceId ns, VictimFilter filter,
                      const ReserveView* reserves);
  PageEntry* TakeDirty(size_t t, NamespaceId ns);
  void CleanWanted();
  uint32_t ScanLimit(size_t t) const;
  void EvictorLoop();
  bool EvictorRound();

  absl::Mutex evictor_mu;
  absl::CondVar evictor_cv;
  bool evictor_kick ABSL_GUARDED_BY(evictor_mu) = false;
  bool evictor_stop ABSL_GUARDED_BY(evictor_mu) = false;
  // Namespaces whose quota pressure asked for cleaning, per tier (0 = none).
  absl::flat_hash_set<std::pair<NamespaceId, size_t>> clean_requests ABSL_GUARDED_BY(evictor_mu);
  absl::Mutex pending_mu;
  std::vector<PendingUnpersist> pending_unpersist ABSL_GUARDED_BY(pending_mu);
  std::atomic<bool> stopping{false};
  std::thread evictor;
};

}  // namespace kvtier::tiers
