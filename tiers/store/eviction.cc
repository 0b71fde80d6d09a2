// Eviction: pick a victim of a tier (leaf-first), then drop it from the
// last tier or demote it one tier down, as the caller's EvictMode allows;
// and the evictor thread that keeps each tier between its watermarks, cleans
// cold RAM pages ahead of need and finishes record deletions queued by the
// frontend, all off the request path. No shard lock is held while a page is
// copied or while a lower tier makes room.
//
// Victim choice costs the same with one tenant or a thousand (page_index.h
// has the lists): a tier-wide pick reads every shard's lock-free "oldest
// page" stamp, scans the shard holding the oldest page (its tier list, one
// list across namespaces, for the oldest leaf) and stops there unless
// another shard's oldest page is older than the leaf it found (a pinned or
// non-leaf tail). A namespace's own pick (its quota, an operator) scans that
// namespace's list in every shard. Which pages a scan may take (never
// pinned or held, the mode's filter, reserves' headroom) is decided in one
// place, the list scan of page_index.cc.
#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "kvtier/test_hooks.h"
#include "tiers/common/io_class.h"
#include "tiers/store/internal/evictor.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {
namespace {

constexpr int kVictimAttempts = 4;  // races with readers are retried this often

}  // namespace

// The headroom above each namespace's reserve in one tier, for a victim scan.
class Evictor::TierReserves final : public ReserveView {
 public:
  TierReserves(const SlotAccounts &slots, size_t t) : slots_(slots), t_(t) {}
  uint64_t Headroom(NamespaceId ns) const override { return slots_.ReserveHeadroom(ns, t_); }

 private:
  const SlotAccounts &slots_;
  const size_t t_;
};

// Leaf-first matters when a page leaves the store: a suffix without its
// prefix is useless. A demotion keeps the page, and a child demoted to a
// lower tier still counts as resident, so below the last tier plain LRU order
// (chains are touched tail-first) is the right one.
uint32_t Evictor::ScanLimit(size_t t) const {
  return core_.IsLastTier(t) ? core_.config.leaf_scan_limit : 0;
}

std::optional<VictimFilter> Evictor::FilterFor(size_t t, EvictMode mode) const {
  if (mode == EvictMode::kMayWrite) return VictimFilter::kAny;
  // Leaving a persistent tier deletes a record (disk): never on the
  // request path.
  if (core_.tiers[t]->tier->persistent()) return std::nullopt;
  if (core_.IsLastTier(t)) return VictimFilter::kAny;
  if (!core_.tiers[t + 1]->tier->persistent()) return VictimFilter::kAny;  // RAM to RAM: a memcpy
  return core_.config.persistent_admission == TierManagerConfig::Admission::kAll
             ? VictimFilter::kClean
             : VictimFilter::kCleanOrUnreused;
}

int Evictor::PickVictimShard(size_t t, NamespaceId ns, VictimFilter filter,
                             const ReserveView *reserves) {
  if (ns != 0) return BestVictimShard(t, ns, filter, reserves);
  // Shards by the stamp of their oldest page, oldest first (a min-heap,
  // popped lazily). That stamp bounds every victim of the shard from below,
  // so once the best victim found is a leaf older than the next shard's
  // oldest page, no shard left can offer a better one: usually the first
  // shard's tail is that leaf (chains are touched tail-first), and one shard
  // is scanned. The result is the one a scan of every shard would give.
  const auto tier = static_cast<uint8_t>(t);
  using Oldest = std::pair<uint64_t, uint32_t>;  // (stamp, shard)
  absl::InlinedVector<Oldest, 16> heap;
  for (uint32_t i = 0; i < core_.index.num_shards(); ++i) {
    const uint64_t stamp = core_.index.shard(i).OldestStamp(tier);
    if (stamp != UINT64_MAX) heap.emplace_back(stamp, i);
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  Victim best;
  int best_shard = -1;
  while (!heap.empty() && !(best.leaf && best.stamp < heap.front().first)) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint32_t i = heap.back().second;
    heap.pop_back();
    IndexShard &shard = core_.index.shard(i);
    absl::MutexLock lock(&shard.mu);
    Victim v = shard.FindVictimLocked(tier, 0, ScanLimit(t), filter, reserves);
    if (v.BetterThan(best)) {
      best = v;
      best_shard = static_cast<int>(i);
    }
  }
  return best_shard;
}

int Evictor::BestVictimShard(size_t t, NamespaceId ns, VictimFilter filter,
                             const ReserveView *reserves) {
  Victim best;
  int best_shard = -1;
  for (uint32_t i = 0; i < core_.index.num_shards(); ++i) {
    IndexShard &shard = core_.index.shard(i);
    absl::MutexLock lock(&shard.mu);
    Victim v = shard.FindVictimLocked(static_cast<uint8_t>(t), ns, ScanLimit(t), filter, reserves);
    if (v.BetterThan(best)) {
      best = v;
      best_shard = static_cast<int>(i);
    }
  }
  return best_shard;
}

Evictor::Taken Evictor::TakeVictim(size_t t, NamespaceId ns, EvictMode mode) {
  Taken v;
  const std::optional<VictimFilter> filter = FilterFor(t, mode);
  if (!filter) return v;
  const TierReserves tier_reserves(slots_, t);
  const ReserveView *reserves =
      ns == 0 && core_.tiers[t]->has_reserves.load() ? &tier_reserves : nullptr;
  for (int attempt = 0; attempt < kVictimAttempts; ++attempt) {
    const int s = PickVictimShard(t, ns, *filter, reserves);
    if (s < 0) return v;
    IndexShard &shard = core_.index.shard(s);
    shard.mu.Lock();
    // Re-pick under the lock: the shard may have changed since the scan.
    PageEntry* e =
        shard.FindVictimLocked(static_cast<uint8_t>(t), ns, ScanLimit(t), *filter, reserves).entry;
    // The claim fails only when another pick took the headroom meanwhile;
    // the next scan sees that.
    if (e == nullptr ||
        (reserves != nullptr && !slots_.ClaimAboveReserve(e->ns, t, e->slot.bytes))) {
      shard.mu.Unlock();
      continue;
    }
    v.claimed = reserves != nullptr;
    if (core_.IsLastTier(t) && PublishesOnEviction(e, t, mode)) {
      // Leaves the store once a copy is in the shared cache: read it
      // without the lock, under our pin (EvictOne).
      core_.PinLocked(e);
      shard.mu.Unlock();
      v.entry = e;
      v.publish = true;
      return v;
    }
    if (core_.IsLastTier(t) || !Admit(e, t)) {
      if (!core_.IsLastTier(t))
        core_.tiers[t]->admission_drops.fetch_add(1, std::memory_order_relaxed);
      const NamespaceId victim_ns = e->ns;
      const uint64_t bytes = e->slot.bytes;
      // Unpinned (the filter), so its bytes are uncharged before the claim
      // goes (a deferred record deletion aside: only the frontend defers,
      // and its kCleanOnly never drops from a persistent tier).
      mover_.DropAndUnlock(shard, e, t);
      if (v.claimed) slots_.ReleaseReserveClaim(victim_ns, t, bytes);
      v.claimed = false;
      v.dropped = true;
      return v;
    }
    // The evictor's own pin keeps readers' pins countable and stops a second
    // evictor from choosing the same page while it is copied.
    core_.PinLocked(e);
    shard.mu.Unlock();
    v.entry = e;
    return v;
  }
  return v;
}

PageMove Evictor::BeginEviction(const Taken &v, size_t t, EvictMode mode) {
  PageMove m = mover_.BeginMove(v.entry, t + 1, MoveKind::kDemote, mode);
  m.reserve_claim = v.claimed;
  return m;
}

bool Evictor::FinishEviction(PageMove &m) {
  const NamespaceId ns = m.e->ns;  // e may be freed by FinishMove
  const bool moved = mover_.FinishMove(m);
  // The source slot is RAM (demotions leave non-last tiers), so it was
  // uncharged synchronously, if the page left.
  if (m.reserve_claim) slots_.ReleaseReserveClaim(ns, m.from, m.old.bytes);
  return moved;
}

size_t Evictor::EvictOne(size_t t, NamespaceId ns, EvictMode mode) {
  for (int attempt = 0; attempt < kVictimAttempts; ++attempt) {
    const Taken v = TakeVictim(t, ns, mode);
    if (v.dropped) return 1;
    if (v.entry == nullptr) return 0;
    if (v.publish) {
      if (PublishAndDrop(v, t)) return 1;
      continue;
    }
    std::vector<PageMove> one;
    one.push_back(BeginEviction(v, t, mode));
    mover_.PersistMoves(one);
    if (FinishEviction(one[0])) return 1;
  }
  return 0;
}

// A batch of demotions into a persistent tier shares one fdatasync and one
// index write: per-page syncs would cap demotion at the disk's sync rate.
size_t Evictor::DemoteBatch(size_t t, size_t max_pages, uint64_t target, EvictMode mode) {
  std::vector<PageMove> batch;
  size_t left = 0;
  uint64_t leaving = 0;  // bytes the picked pages will free
  const Tier &tier = *core_.tiers[t]->tier;
  while (batch.size() + left < max_pages && tier.used_bytes() > target + leaving) {
    const Taken v = TakeVictim(t, 0, mode);
    if (v.dropped) {
      ++left;
      continue;
    }
    if (v.entry == nullptr) break;
    batch.push_back(BeginEviction(v, t, mode));
    leaving += batch.back().old.bytes;
  }
  mover_.PersistMoves(batch);
  for (PageMove& m : batch) left += FinishEviction(m) ? 1 : 0;
  return left;
}

bool Evictor::Admit(const PageEntry *e, size_t t) const {
  const Tier &below = *core_.tiers[t + 1]->tier;
  if (core_.config.persistent_admission == TierManagerConfig::Admission::kAll) return true;
  if (e->clean() && core_.IsBackupTier(t + 1)) return true;  // already durable there
  if (!below.persistent()) return true;
  return e->flags & PageEntry::kReused;
}

size_t Evictor::EvictTo(size_t t, uint64_t target) {
  slots_.DrainPendingUnpersist();
  const Tier &tier = *core_.tiers[t]->tier;
  // With reclaim_copies_first, the persistent tier's room comes first from
  // copies of pages that are also in RAM (write-back only; under
  // write-through they are the promise). Off (default): plain leaf-first LRU
  // over the pages that live only there; see TierManagerConfig.
  if (core_.config.reclaim_copies_first && core_.IsBackupTier(t) && tier.used_bytes() > target) {
    ReclaimBackups(tier.used_bytes() - target);
  }
  size_t total = 0;
  while (tier.used_bytes() > target && !stopping_.load(std::memory_order_relaxed)) {
    // Room below first: demotions would otherwise fill the lower tier to
    // the brim, one inline eviction at a time, and a PUT that lands there
    // directly (it may not evict: no disk I/O on the request path) would
    // find none.
    if (!core_.IsLastTier(t) &&
        core_.tiers[t + 1]->tier->used_bytes() > core_.tiers[t + 1]->high_bytes) {
      EvictTo(t + 1, core_.tiers[t + 1]->low_bytes);
    }
    size_t batch = 0;
    if (!core_.IsLastTier(t) && core_.tiers[t + 1]->tier->persistent()) {
      batch = DemoteBatch(t, core_.config.eviction_batch, target, EvictMode::kMayWrite);
    } else {
      while (batch < core_.config.eviction_batch && tier.used_bytes() > target &&
             EvictOne(t, 0, EvictMode::kMayWrite) > 0) {
        ++batch;
      }
    }
    total += batch;
    if (batch < core_.config.eviction_batch) break;  // nothing more evictable (or done)
  }
  // Only copies of RAM pages left to give: they go after all.
  if (core_.IsBackupTier(t) && tier.used_bytes() > target) {
    ReclaimBackups(tier.used_bytes() - target);
  }
  return total;
}

void Evictor::KickEvictorIfHigh(size_t t) {
  if (core_.tiers[t]->tier->used_bytes() <= core_.tiers[t]->high_bytes) return;
  KickEvictor(t);
}

void Evictor::KickEvictor(size_t t) {
  if (!core_.config.start_evictor_thread) return;
  absl::MutexLock lock(&mu_);
  kick_ = true;
  cv_.Signal();
}

void Evictor::Start() {
  thread_ = std::thread([this] { EvictorLoop(); });
}

void Evictor::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.Signal();
  }
  thread_.join();
}

// One round: tiers above their high watermark first (room is what requests
// wait for), then queued record deletions, then one cleaning batch per tier.
// Returns true when cleaning made progress (another round follows at once).
bool Evictor::EvictorRound() {
  for (size_t t = 0; t < core_.tiers.size(); ++t) {
    if (core_.tiers[t]->tier->used_bytes() > core_.tiers[t]->high_bytes)
      EvictTo(t, core_.tiers[t]->low_bytes);
  }
  slots_.DrainPendingUnpersist();
  bool progress = false;
  for (size_t t = 0; t + 1 < core_.tiers.size(); ++t) {
    if (stopping_.load(std::memory_order_relaxed)) return false;
    if (core_.tiers[t]->tier->used_bytes() > core_.tiers[t]->clean_start_bytes &&
        CleanTier(t, 0, core_.tiers[t]->clean_bytes) > 0) {
      progress = true;
    }
  }
  return CleanRequested() || progress;
}

void Evictor::EvictorLoop() {
  // Cleaning and demotion writes: the device's lowest class (io_class.h).
  IoClassScope io_class(IoClass::kWriteback);
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    // The periodic wake-up catches tiers filled by paths that do not kick
    // (demotions into a lower tier).
    if (!kick_) cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
    kick_ = false;
    if (stop_) break;
    mu_.Unlock();
    while (EvictorRound() && !stopping_.load(std::memory_order_relaxed)) {
    }
    mu_.Lock();
  }
}

}  // namespace kvtier::tiers
