// SlotAccounts: a namespace's bytes in a tier are charged before a slot is
// allocated there and uncharged after it is freed (slot_charge.cc), so quota
// checks never race a PUT, a promotion or a demotion; reserved shares no
// other namespace's pressure may take (tenant_reserves.cc); and the one way
// a slot goes back (ReleaseSlot: record first, then slot, then bytes).
// Making room is the evictor's, seen here through RoomMaker.
// Internal to tiers/store/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {

// What slot accounting and the page-move primitive need from the evictor
// (evictor.h implements it): room, and a nudge.
class RoomMaker {
 public:
  virtual ~RoomMaker() = default;
  // Evicts one page of tier t (of namespace ns; 0: any) as `mode` allows;
  // returns the pages that left the tier (0 or 1).
  virtual size_t EvictOne(size_t t, NamespaceId ns, EvictMode mode) = 0;
  // Makes room in the persistent tier by forgetting backups of RAM pages
  // (write-back only); returns bytes freed.
  virtual uint64_t ReclaimBackups(uint64_t want_bytes) = 0;
  // Wakes the evictor thread (for tier t), or only above its high watermark.
  virtual void KickEvictor(size_t t) = 0;
  virtual void KickEvictorIfHigh(size_t t) = 0;
};

class SlotAccounts {
 public:
  explicit SlotAccounts(StoreCore &core) : core_(core) {}
  // Set once, before any slot is charged (TierManager::Impl).
  void SetRoomMaker(RoomMaker *room) { room_ = room; }
  RoomMaker &room() const { return *room_; }

  // Charges `bytes` to ns in tier t, first evicting ns's own pages there
  // (as `mode` allows) when that is what it takes. False when the quota
  // cannot be met.
  bool ChargeQuota(NamespaceId ns, size_t t, uint64_t bytes, EvictMode mode);
  void Uncharge(NamespaceId ns, size_t t, uint64_t bytes);
  // A slot of tier t, evicting (as `mode` allows, bounded) to make room.
  absl::StatusOr<Slot> AllocateWithEviction(size_t t, uint64_t bytes, EvictMode mode);
  // Charge, then allocate, in tier t; uncharges again on failure.
  absl::StatusOr<Slot> ChargeAndAllocate(NamespaceId ns, size_t t, uint64_t bytes, EvictMode mode);

  // Frees a slot of tier t and its quota bytes; a persistent slot's record
  // goes first. On a thread that may not do disk I/O the record deletion
  // (and so the free) is queued for the evictor thread.
  void ReleaseSlot(size_t t, NamespaceId ns, const Slot &slot, const PageMeta &meta);
  // Frees a slot no record points at (never persisted, or its record is
  // gone) and its quota bytes.
  void FreeSlot(size_t t, NamespaceId ns, const Slot &slot);
  // Finishes queued ReleaseSlot work (evictor thread, and at shutdown).
  void DrainPendingUnpersist();
  // Gives back e's durable copy, if it has one.
  void FreeBackup(PageEntry *e);
  // Frees a detached, unpinned entry: slot, backup, quota bytes and memory.
  void FreeEntry(PageEntry *e);
  // Unpins e, freeing it when it was detached and this was the last pin.
  // hold: the pin was a HoldForLease.
  void Unpin(PageEntry *e, bool hold = false);

  // Reserves (tenant_reserves.cc). Bytes of ns's pages that may still
  // leave tier t (UINT64_MAX: no reserve).
  uint64_t ReserveHeadroom(NamespaceId ns, size_t t) const;
  // Claims `bytes` of ns's headroom in t; false when they do not fit.
  bool ClaimAboveReserve(NamespaceId ns, size_t t, uint64_t bytes);
  // Gives a claim back once the page's bytes are uncharged from t (or the
  // page stayed there).
  void ReleaseReserveClaim(NamespaceId ns, size_t t, uint64_t bytes);

 private:
  bool TryCharge(NamespaceState &ns, size_t t, uint64_t bytes);

  StoreCore &core_;
  RoomMaker *room_ = nullptr;
  absl::Mutex pending_mu_;
  std::vector<PendingUnpersist> pending_unpersist_ ABSL_GUARDED_BY(pending_mu_);
};

// Refuses reserves that exceed the tier, the namespace's quota, or leave the
// others too little of the tier (max_reserved_fraction).
absl::Status ValidateReserves(const StoreCore &core, const NamespaceConfig &nc,
                              const NamespaceState &ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.ns_mu);

}  // namespace kvtier::tiers
