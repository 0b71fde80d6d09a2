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

size_t TierManager::Impl::EvictOne(size_t t, NamespaceId ns) {
  for (int attempt = 0; attempt < kVictimAttempts; ++attempt) {
    const int s = PickVictimShard(t, ns);
    if (s < 0) return 0;
    IndexShard& shard = index.shard(s);
    shard.mu.Lock();
    // Re-pick under the lock: the shard may have changed since the scan.
    PageEntry* e =
        shard.FindVictimLocked(static_cast<uint8_t>(t), ns, ScanLimit(t)).entry;
    if (e == nullptr) {
      shard.mu.Unlock();
      continue;
    }
    if (IsLastTier(t)) return DropLocked(shard, e, t);
    if (!Admit(e, t)) {
      tiers[t]->admission_drops.fetch_add(1, std::memory_order_relaxed);
      return DropLocked(shard, e, t);
    }
    // The evictor's own pin keeps readers' pins countable and stops a second
    // evictor from choosing the same page while it is copied.
    PinLocked(e);
    shard.mu.Unlock();
    if (Demote(shard, e, t) > 0) return 1;
  }
  return 0;
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

size_t TierManager::Impl::Demote(IndexShard& shard, PageEntry* e, size_t t) {
  // Pinned by us: these fields cannot change until we unpin.
  const Slot old = e->slot;
  const NamespaceId ns = e->ns;
  const size_t to = t + 1;
  absl::StatusOr<Slot> dst = absl::ResourceExhaustedError("over quota in lower tier");
  if (ChargeQuota(ns, to, old.bytes)) {
    dst = AllocateWithEviction(to, old.bytes);
    if (!dst.ok()) Uncharge(ns, to, old.bytes);
  }
  bool copied = dst.ok() && CopyBetweenTiers(t, old, to, *dst);
  // A persistent tier records the page once its bytes are durable there.
  Tier& lower = *tiers[to]->tier;
  PageMeta meta;
  uint64_t checksum = 0;
  if (copied && lower.persistent()) {
    // RAM pages carry no checksum; the copy that leaves for NVMe gets one.
    if (const uint8_t* p = tiers[t]->tier->Address(old)) checksum = XXH3_64bits(p, old.bytes);
    {
      absl::MutexLock lock(&shard.mu);
      meta = MetaOf(e);
    }
    if (checksum != 0) meta.checksum = checksum;
    if (!lower.Persist(*dst, meta).ok()) {
      copied = false;
      meta.ns_name = {};  // nothing was recorded: nothing to forget below
    }
  }
  if (copied) KVTIER_KILL_POINT("demote.after_persist");
  shard.mu.Lock();
  if (copied && !e->detached() && e->pins == 1) {
    UnpinLocked(e);
    tiers[t]->pages.fetch_sub(1, std::memory_order_relaxed);
    tiers[to]->pages.fetch_add(1, std::memory_order_relaxed);
    e->slot = *dst;
    if (checksum != 0) e->checksum = checksum;
    // A fresh stamp in the lower tier: pages arrive there in eviction order,
    // which is already leaf-first.
    shard.MoveTierLocked(e, static_cast<uint8_t>(to), NextStamp());
    shard.mu.Unlock();
    tiers[t]->tier->Free(old);
    Uncharge(ns, t, old.bytes);
    tiers[t]->evictions.fetch_add(1, std::memory_order_relaxed);
    tiers[t]->demotions.fetch_add(1, std::memory_order_relaxed);
    KickEvictorIfHigh(to);
    return 1;
  }
  if (dst.ok()) {
    if (lower.persistent() && !meta.ns_name.empty()) lower.Unpersist(*dst, meta);
    tiers[to]->tier->Free(*dst);
    Uncharge(ns, to, old.bytes);
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
  if (!tiers[t + 1]->tier->persistent()) return true;
  return e->flags & PageEntry::kReused;
}

size_t TierManager::Impl::EvictTo(size_t t, uint64_t target) {
  const Tier& tier = *tiers[t]->tier;
  size_t total = 0;
  while (tier.used_bytes() > target && !stopping.load(std::memory_order_relaxed)) {
    size_t batch = 0;
    while (batch < config.eviction_batch && tier.used_bytes() > target && EvictOne(t, 0) > 0) {
      ++batch;
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
