// Eviction: pick the global LRU victim of a tier (leaf-first), then drop it
// from the last tier or demote it one tier down; and the evictor thread that
// keeps each tier between its watermarks off the request path. No shard lock
// is held while a page is copied or while a lower tier makes room.
#include <algorithm>
#include <vector>

#include "kvtier/test_hooks.h"
#include "tiers/tier_manager_impl.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvtier::tiers {
namespace {

constexpr uint64_t kCopyChunk = 1 << 20;
constexpr int kVictimAttempts = 4;  // races with readers are retried this often

}  // namespace

// Leaf-first matters when a page leaves the store: a suffix without its
// prefix is useless. A demotion keeps the page, and a child demoted to a
// lower tier still counts as resident, so below the last tier plain LRU order
// (chains are touched tail-first) is the right one.
uint32_t TierManager::Impl::ScanLimit(size_t t) const {
  return IsLastTier(t) ? config.leaf_scan_limit : 0;
}

int TierManager::Impl::PickVictimShard(size_t t, NamespaceId ns) {
  Victim best;
  int best_shard = -1;
  for (uint32_t i = 0; i < index.num_shards(); ++i) {
    IndexShard& shard = index.shard(i);
    absl::MutexLock lock(&shard.mu);
    Victim v = shard.FindVictimLocked(static_cast<uint8_t>(t), ns, ScanLimit(t));
    if (v.BetterThan(best)) {
      best = v;
      best_shard = static_cast<int>(i);
    }
  }
  return best_shard;
}

PageEntry* TierManager::Impl::TakeVictim(size_t t, NamespaceId ns, bool* dropped) {
  *dropped = false;
  for (int attempt = 0; attempt < kVictimAttempts; ++attempt) {
    const int s = PickVictimShard(t, ns);
    if (s < 0) return nullptr;
    IndexShard& shard = index.shard(s);
    shard.mu.Lock();
    // Re-pick under the lock: the shard may have changed since the scan.
    PageEntry* e = shard.FindVictimLocked(static_cast<uint8_t>(t), ns, ScanLimit(t)).entry;
    if (e == nullptr) {
      shard.mu.Unlock();
      continue;
    }
    if (IsLastTier(t) || !Admit(e, t)) {
      if (!IsLastTier(t)) tiers[t]->admission_drops.fetch_add(1, std::memory_order_relaxed);
      DropLocked(shard, e, t);
      *dropped = true;
      return nullptr;
    }
    // The evictor's own pin keeps readers' pins countable and stops a second
    // evictor from choosing the same page while it is copied.
    PinLocked(e);
    shard.mu.Unlock();
    return e;
  }
  return nullptr;
}

size_t TierManager::Impl::EvictOne(size_t t, NamespaceId ns) {
  for (int attempt = 0; attempt < kVictimAttempts; ++attempt) {
    bool dropped = false;
    PageEntry* e = TakeVictim(t, ns, &dropped);
    if (dropped) return 1;
    if (e == nullptr) return 0;
    Demotion d = PrepareDemotion(e, t);
    if (d.copied && !d.reuses_backup && tiers[t + 1]->tier->persistent()) {
      d.persisted = tiers[t + 1]->tier->Persist(*d.dst, d.meta).ok();
      d.copied = d.persisted;
      if (d.persisted) KVTIER_KILL_POINT("demote.after_persist");
    }
    if (FinishDemotion(d) > 0) return 1;
  }
  return 0;
}

// A batch of demotions into a persistent tier shares one fdatasync and one
// index write: per-page syncs would cap demotion at the disk's sync rate.
size_t TierManager::Impl::DemoteBatch(size_t t, size_t max_pages, uint64_t target) {
  std::vector<Demotion> batch;
  size_t left = 0;
  uint64_t leaving = 0;  // bytes the picked pages will free
  const Tier& tier = *tiers[t]->tier;
  while (batch.size() + left < max_pages && tier.used_bytes() > target + leaving) {
    bool dropped = false;
    PageEntry* e = TakeVictim(t, 0, &dropped);
    if (dropped) {
      ++left;
      continue;
    }
    if (e == nullptr) break;
    batch.push_back(PrepareDemotion(e, t));
    leaving += batch.back().old.bytes;
  }
  std::vector<Slot> slots;
  std::vector<PageMeta> metas;
  for (const Demotion& d : batch) {
    if (!d.copied || d.reuses_backup) continue;
    slots.push_back(*d.dst);
    metas.push_back(d.meta);
  }
  const bool persisted = slots.empty() || tiers[t + 1]->tier->PersistBatch(slots, metas).ok();
  if (persisted && !slots.empty()) KVTIER_KILL_POINT("demote.after_persist");
  for (Demotion& d : batch) {
    if (!d.reuses_backup) {
      d.persisted = d.copied && persisted;
      d.copied = d.persisted;
    }
    left += FinishDemotion(d);
  }
  return left;
}

size_t TierManager::Impl::DropLocked(IndexShard& shard, PageEntry* e, size_t t) {
  DetachEntryLocked(shard, e);
  const bool free_now = e->pins == 0;
  const bool counted = e->flags & PageEntry::kCountedInParent;
  const NamespaceId ns = e->ns;
  const PageKey parent = e->parent;
  shard.mu.Unlock();
  tiers[t]->evictions.fetch_add(1, std::memory_order_relaxed);
  tiers[t]->dropped.fetch_add(1, std::memory_order_relaxed);
  if (counted) DetachFromParent(ns, parent);
  if (free_now) FreeEntry(e);
  return 1;
}

TierManager::Impl::Demotion TierManager::Impl::PrepareDemotion(PageEntry* e, size_t t) {
  Demotion d;
  d.e = e;
  d.shard = &index.ShardFor(e->ns, e->key);
  d.from = t;
  // Pinned by us: these fields cannot change until we unpin.
  d.old = e->slot;
  const NamespaceId ns = e->ns;
  const size_t to = t + 1;
  bool has_backup;
  Slot backup;
  {
    absl::MutexLock lock(&d.shard->mu);
    has_backup = (e->flags & PageEntry::kHasBackup) && to == tiers.size() - 1;
    backup = e->backup;
  }
  if (has_backup) {
    // Write-through already put a durable copy there: nothing to write.
    d.dst = backup;
    d.copied = d.persisted = d.reuses_backup = true;
    return d;
  }
  if (ChargeQuota(ns, to, d.old.bytes)) {
    d.dst = AllocateWithEviction(to, d.old.bytes);
    if (!d.dst.ok()) Uncharge(ns, to, d.old.bytes);
  }
  d.copied = d.dst.ok() && CopyBetweenTiers(t, d.old, to, *d.dst);
  if (d.copied && tiers[to]->tier->persistent()) {
    // RAM pages carry no checksum; the copy that leaves for NVMe gets one.
    if (const uint8_t* p = tiers[t]->tier->Address(d.old)) d.checksum = XXH3_64bits(p, d.old.bytes);
    absl::MutexLock lock(&d.shard->mu);
    d.meta = MetaOf(e);
    if (d.checksum != 0) d.meta.checksum = d.checksum;
  }
  return d;
}

size_t TierManager::Impl::FinishDemotion(Demotion& d) {
  PageEntry* e = d.e;
  IndexShard& shard = *d.shard;
  const size_t t = d.from, to = t + 1;
  const NamespaceId ns = e->ns;
  shard.mu.Lock();
  if (d.copied && !e->detached() && e->pins == 1) {
    UnpinLocked(e);
    tiers[t]->pages.fetch_sub(1, std::memory_order_relaxed);
    tiers[to]->pages.fetch_add(1, std::memory_order_relaxed);
    e->slot = *d.dst;
    if (d.reuses_backup) e->flags &= ~PageEntry::kHasBackup;
    if (d.checksum != 0) e->checksum = d.checksum;
    // A fresh stamp in the lower tier: pages arrive there in eviction order.
    shard.MoveTierLocked(e, static_cast<uint8_t>(to), NextStamp());
    shard.mu.Unlock();
    tiers[t]->tier->Free(d.old);
    Uncharge(ns, t, d.old.bytes);
    tiers[t]->evictions.fetch_add(1, std::memory_order_relaxed);
    tiers[t]->demotions.fetch_add(1, std::memory_order_relaxed);
    KickEvictorIfHigh(to);
    return 1;
  }
  if (d.dst.ok() && !d.reuses_backup) {  // a reused backup stays the page's copy
    Tier& lower = *tiers[to]->tier;
    if (d.persisted) lower.Unpersist(*d.dst, d.meta);
    lower.Free(*d.dst);
    Uncharge(ns, to, d.old.bytes);
  }
  return AbandonDemotionLocked(shard, e, t);
}

size_t TierManager::Impl::AbandonDemotionLocked(IndexShard& shard, PageEntry* e, size_t t) {
  const bool free_now = UnpinLocked(e);
  if (e->detached()) {  // deleted while we copied: it has left the tier anyway
    shard.mu.Unlock();
    if (free_now) FreeEntry(e);
    return 1;
  }
  if (e->pins > 0) {  // a reader pinned it meanwhile: leave it, pick another
    shard.mu.Unlock();
    return 0;
  }
  return DropLocked(shard, e, t);  // the lower tier cannot take it
}

bool TierManager::Impl::CopyBetweenTiers(size_t from, const Slot& src, size_t to, const Slot& dst) {
  Tier& a = *tiers[from]->tier;
  Tier& b = *tiers[to]->tier;
  const uint64_t n = src.bytes;
  if (const uint8_t* p = a.Address(src)) return b.Write(dst, 0, p, n).ok();
  if (uint8_t* q = b.Address(dst)) return a.Read(src, 0, q, n).ok();
  std::vector<uint8_t> buf(std::min(n, kCopyChunk));
  for (uint64_t off = 0; off < n; off += buf.size()) {
    const uint64_t len = std::min<uint64_t>(buf.size(), n - off);
    if (!a.Read(src, off, buf.data(), len).ok() || !b.Write(dst, off, buf.data(), len).ok()) {
      return false;
    }
  }
  return true;
}

bool TierManager::Impl::Admit(const PageEntry* e, size_t t) const {
  if (config.persistent_admission == TierManagerConfig::Admission::kAll) return true;
  if (e->flags & PageEntry::kHasBackup) return true;  // already durable there
  if (!tiers[t + 1]->tier->persistent()) return true;
  return e->flags & PageEntry::kReused;
}

size_t TierManager::Impl::EvictTo(size_t t, uint64_t target) {
  const Tier& tier = *tiers[t]->tier;
  size_t total = 0;
  while (tier.used_bytes() > target && !stopping.load(std::memory_order_relaxed)) {
    size_t batch = 0;
    if (!IsLastTier(t) && tiers[t + 1]->tier->persistent()) {
      batch = DemoteBatch(t, config.eviction_batch, target);
    } else {
      while (batch < config.eviction_batch && tier.used_bytes() > target && EvictOne(t, 0) > 0) {
        ++batch;
      }
    }
    total += batch;
    if (batch < config.eviction_batch) break;  // nothing more evictable (or done)
  }
  return total;
}

void TierManager::Impl::KickEvictorIfHigh(size_t t) {
  if (tiers[t]->tier->used_bytes() <= tiers[t]->high_bytes) return;
  KickEvictor(t);
}

void TierManager::Impl::KickEvictor(size_t t) {
  if (!config.start_evictor_thread) return;
  absl::MutexLock lock(&evictor_mu);
  evictor_kick = true;
  evictor_cv.Signal();
}

void TierManager::Impl::StartEvictor() {
  evictor = std::thread([this] { EvictorLoop(); });
}

void TierManager::Impl::StopEvictor() {
  if (!evictor.joinable()) return;
  stopping.store(true, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&evictor_mu);
    evictor_stop = true;
    evictor_cv.Signal();
  }
  evictor.join();
}

void TierManager::Impl::EvictorLoop() {
  absl::MutexLock lock(&evictor_mu);
  while (!evictor_stop) {
    // The periodic wake-up catches tiers filled by paths that do not kick
    // (demotions into a lower tier).
    if (!evictor_kick) evictor_cv.WaitWithTimeout(&evictor_mu, absl::Milliseconds(100));
    evictor_kick = false;
    if (evictor_stop) break;
    evictor_mu.Unlock();
    for (size_t t = 0; t < tiers.size(); ++t) {
      if (tiers[t]->tier->used_bytes() > tiers[t]->high_bytes) EvictTo(t, tiers[t]->low_bytes);
    }
    evictor_mu.Lock();
  }
}

}  // namespace kvtier::tiers
