// Slot accounting: a namespace's bytes in a tier are charged before a slot is
// allocated and uncharged after it is freed, so quota checks never race a
// PUT, a promotion or a demotion. Making room evicts the namespace's own pages
// for its quota and anyone's for the tier (as the EvictMode allows), bounded
// so a request never spins.
#include <vector>

#include "absl/strings/str_cat.h"
#include "tiers/common/io_guard.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {

bool SlotAccounts::TryCharge(NamespaceState &ns, size_t t, uint64_t bytes) {
  Counter& used = ns.tier_bytes[t];
  if (ns.quota[t] == 0) {
    used.fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }
  uint64_t cur = used.load(std::memory_order_relaxed);
  do {
    if (cur + bytes > ns.quota[t]) return false;
  } while (!used.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
  return true;
}

void SlotAccounts::Uncharge(NamespaceId ns, size_t t, uint64_t bytes) {
  if (NamespaceState *s = core_.Ns(ns))
    s->tier_bytes[t].fetch_sub(bytes, std::memory_order_relaxed);
}

bool SlotAccounts::ChargeQuota(NamespaceId ns, size_t t, uint64_t bytes, EvictMode mode) {
  NamespaceState &s = *core_.Ns(ns);
  if (s.quota[t] != 0 && bytes > s.quota[t]) return false;
  // Only this namespace's own pages make room under its quota; another
  // namespace's pages are never evicted on its behalf.
  while (!TryCharge(s, t, bytes)) {
    if (room_->EvictOne(t, ns, mode) == 0) return false;
    s.quota_evictions.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

absl::StatusOr<Slot> SlotAccounts::AllocateWithEviction(size_t t, uint64_t bytes, EvictMode mode) {
  Tier &tier = *core_.tiers[t]->tier;
  // Bounded: with mixed page sizes, freeing a slab may take many evictions,
  // but a request must never spin; the evictor keeps headroom normally.
  const uint64_t max_evictions = uint64_t{core_.config.eviction_batch} * 4;
  for (uint64_t evicted = 0;; ++evicted) {
    absl::StatusOr<Slot> slot = tier.Allocate(bytes);
    if (slot.ok() || !absl::IsResourceExhausted(slot.status())) return slot;
    if (evicted < max_evictions && room_->EvictOne(t, 0, mode) > 0) continue;
    // The persistent tier's last resort: copies of pages also in RAM.
    if (mode == EvictMode::kMayWrite && core_.IsBackupTier(t) && room_->ReclaimBackups(bytes) > 0) {
      continue;
    }
    return absl::ResourceExhaustedError(absl::StrCat(
          "full (", tier.used_bytes(), " of ", tier.capacity_bytes(), " bytes used, ", evicted,
          " pages evicted, the rest pinned, busy",
          mode == EvictMode::kCleanOnly ? " or not yet written back" : "",
          "): ", slot.status().message()));
  }
}

absl::StatusOr<Slot> SlotAccounts::ChargeAndAllocate(NamespaceId ns, size_t t, uint64_t bytes,
                                                     EvictMode mode) {
  if (!ChargeQuota(ns, t, bytes, mode)) {
    const NamespaceState &s = *core_.Ns(ns);
    return absl::ResourceExhaustedError(absl::StrCat(
        "over quota (", s.tier_bytes[t].load(), " of ", s.quota[t], " bytes used, own pages ",
        mode == EvictMode::kCleanOnly ? "pinned, too few or not yet written back)"
                                      : "pinned or too few)"));
  }
  absl::StatusOr<Slot> slot = AllocateWithEviction(t, bytes, mode);
  if (!slot.ok()) Uncharge(ns, t, bytes);  // charged, never allocated
  return slot;
}

void SlotAccounts::Unpin(PageEntry *e, bool hold) {
  IndexShard &shard = core_.index.ShardFor(e->ns, e->key);
  bool free_now;
  {
    absl::MutexLock lock(&shard.mu);
    if (hold) --e->holds;
    free_now = core_.UnpinLocked(e);
  }
  if (free_now) FreeEntry(e);
}

void SlotAccounts::FreeEntry(PageEntry *e) {
  FreeBackup(e);
  ReleaseSlot(e->tier, e->ns, e->slot, core_.MetaOf(e));
  core_.entries.Delete(e);
}

void SlotAccounts::ReleaseSlot(size_t t, NamespaceId ns, const Slot &slot, const PageMeta &meta) {
  Tier &tier = *core_.tiers[t]->tier;
  if (tier.persistent()) {
    if (DiskIoForbiddenHere()) {
      // The record must go before the slot is reused, and deleting it is a
      // write: the evictor thread does both, soon.
      {
        absl::MutexLock lock(&pending_mu_);
        pending_unpersist_.push_back(PendingUnpersist{t, ns, slot, meta});
      }
      room_->KickEvictor(t);
      return;
    }
    tier.durable()->Unpersist(slot, meta);
  }
  FreeSlot(t, ns, slot);
}

void SlotAccounts::FreeSlot(size_t t, NamespaceId ns, const Slot &slot) {
  core_.tiers[t]->tier->Free(slot);
  Uncharge(ns, t, slot.bytes);
}

void SlotAccounts::DrainPendingUnpersist() {
  std::vector<PendingUnpersist> work;
  {
    absl::MutexLock lock(&pending_mu_);
    work.swap(pending_unpersist_);
  }
  for (const PendingUnpersist &p : work) {
    core_.tiers[p.tier]->tier->durable()->Unpersist(p.slot, p.meta);
    FreeSlot(p.tier, p.ns, p.slot);
  }
}

void SlotAccounts::FreeBackup(PageEntry *e) {
  if (!e->clean()) return;
  ReleaseSlot(core_.backup_tier, e->ns, e->backup, core_.MetaOf(e));
  e->flags &= ~PageEntry::kHasBackup;
}

}  // namespace kvtier::tiers
