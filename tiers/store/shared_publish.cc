// The store's side of the shared cache (shared_cache.h): pages leaving the
// store from its last tier are published first (as shared_admission says),
// so other daemons — and this one, later — find them in the cluster. Only
// the evictor and operator actions (EvictMode::kMayWrite) publish: reading
// the page back from NVMe is disk I/O, and never on the request path.
// Write-through publishing (shared_write_through) is Reservation::Fill's.
#include <memory>

#include "tiers/store/internal/evictor.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/read_checks.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {

bool Evictor::PublishesOnEviction(const PageEntry *e, size_t t, EvictMode mode) const {
  if (core_.shared == nullptr || core_.config.shared_write_through ||
      mode != EvictMode::kMayWrite || !core_.IsLastTier(t) || e->detached())
    return false;
  if (core_.config.shared_admission == TierManagerConfig::Admission::kAll) return true;
  return e->flags & PageEntry::kReused;
}

void Evictor::PublishLeaving(PageEntry *e, size_t t) {
  const NamespaceState *state = core_.Ns(e->ns);
  if (state == nullptr) return;
  Tier &tier = *core_.tiers[t]->tier;
  const uint64_t bytes = e->slot.bytes;
  const uint8_t* page = tier.Address(e->slot);
  std::unique_ptr<uint8_t[]> copy;
  if (page == nullptr) {  // NVMe: read it back, checked like any read (a
                          // corrupt page is counted and dropped, not shared)
    copy.reset(new uint8_t[bytes]);
    if (!checks_.KnownCorrupt(e).ok() || !tier.Read(e->slot, 0, copy.get(), bytes).ok() ||
        !checks_.VerifyRead(e, t, copy.get()).ok())
      return;
    page = copy.get();
  } else {
    core_.CountOut(t, bytes);  // read from the RAM slot for the cluster
  }
  core_.shared->Publish(state->name, e->key, e->parent, page, bytes);
}

bool Evictor::PublishAndDrop(const Taken &v, size_t t) {
  PageEntry* e = v.entry;
  const NamespaceId ns = e->ns;
  const uint64_t bytes = e->slot.bytes;
  PublishLeaving(e, t);
  IndexShard &shard = core_.index.ShardFor(e->ns, e->key);
  shard.mu.Lock();
  bool dropped = false;
  // Someone pinned it meanwhile (a GET is reading it): it stays, and its
  // record in the cluster is merely early.
  if (!e->detached() && e->pins == 1 && e->tier == t) {
    core_.UnpinLocked(e);
    mover_.DropAndUnlock(shard, e, t);
    dropped = true;
  } else {
    const bool free_now = core_.UnpinLocked(e);
    shard.mu.Unlock();
    if (free_now) slots_.FreeEntry(e);
  }
  if (v.claimed) slots_.ReleaseReserveClaim(ns, t, bytes);
  return dropped;
}

}  // namespace kvtier::tiers
