// Operator actions on the store: evict one namespace's pages (from one tier,
// or out of the store) and flush the RAM tiers down to the persistent tier.
// They reuse the evictor's own paths, so pins, quotas, leaf-first order and
// "bytes durable before their record" hold exactly as for background eviction.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tiers/store/internal/evictor.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {
namespace {

// The key of the best unpinned victim of namespace `ns` in tier `t`, across
// shards (leaves first, then oldest); nullopt when there is none.
std::optional<PageKey> PickVictimKey(PageIndex& index, size_t t, NamespaceId ns,
                                     uint32_t scan_limit) {
  Victim best;
  std::optional<PageKey> key;
  for (uint32_t i = 0; i < index.num_shards(); ++i) {
    IndexShard& shard = index.shard(i);
    absl::MutexLock lock(&shard.mu);
    Victim v = shard.FindVictimLocked(static_cast<uint8_t>(t), ns, scan_limit);
    if (!v.BetterThan(best)) continue;
    best = v;
    key = v.entry->key;  // copied under the lock: the entry may go once unlocked
  }
  return key;
}

}  // namespace

absl::StatusOr<uint64_t> TierManager::EvictNamespace(NamespaceId ns, std::optional<TierKind> tier,
                                                     uint64_t max_pages) {
  NamespaceState* state = impl_->core.Ns(ns);
  if (state == nullptr) return absl::NotFoundError(absl::StrCat("no namespace with id ", ns));
  uint64_t evicted = 0;
  // Under concurrent PUTs into the namespace the loops are bounded by what
  // was there when they started.
  uint64_t budget = state->pages.load(std::memory_order_relaxed) + 64;
  if (tier) {
    for (size_t t = 0; t < impl_->core.tiers.size(); ++t) {
      if (impl_->core.tiers[t]->tier->kind() != *tier) continue;
      while (evicted < std::min(max_pages, budget) &&
             impl_->evictor->EvictOne(t, ns, EvictMode::kMayWrite) > 0)
        ++evicted;
      return evicted;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("this store has no ", std::string(TierName(*tier)), " tier"));
  }
  // Out of the store: the coldest pages live in the lowest tier.
  for (size_t t = impl_->core.tiers.size(); t-- > 0 && evicted < max_pages;) {
    while (evicted < max_pages && budget > 0) {
      std::optional<PageKey> key =
          PickVictimKey(impl_->core.index, t, ns, impl_->core.config.leaf_scan_limit);
      if (!key) break;
      --budget;
      if (Delete(ns, *key)) {
        impl_->core.tiers[t]->evictions.fetch_add(1, std::memory_order_relaxed);
        impl_->core.tiers[t]->dropped.fetch_add(1, std::memory_order_relaxed);
        ++evicted;
      }
    }
  }
  return evicted;
}

absl::StatusOr<uint64_t> TierManager::FlushToPersistent() {
  // Flushes to the backup tier (NVMe), where a restart looks.
  const size_t last = std::min(impl_->core.backup_tier, impl_->core.tiers.size() - 1);
  if (!impl_->core.HasBackupTier())
    return absl::FailedPreconditionError(
        absl::StrCat("no persistent tier to flush to (the lowest tier is ",
                     std::string(TierName(impl_->core.tiers[last]->tier->kind())), ")"));
  uint64_t flushed = 0;
  for (size_t t = 0; t < last; ++t) {
    // EvictTo stops after a short batch (a reader pinned a victim); go on
    // while it makes progress, but not after pages that arrive meanwhile.
    uint64_t budget = impl_->core.tiers[t]->pages.load(std::memory_order_relaxed) + 64;
    uint64_t moved_here = 0;
    while (moved_here < budget) {
      const size_t moved = impl_->evictor->EvictTo(t, 0);
      moved_here += moved;
      if (moved == 0 || impl_->core.tiers[t]->tier->used_bytes() == 0) break;
    }
    if (t + 1 == last) flushed = moved_here;
  }
  return flushed;
}

uint64_t TierManager::NamespacePages(NamespaceId ns) const {
  NamespaceState* state = impl_->core.Ns(ns);
  return state == nullptr ? 0 : state->pages.load(std::memory_order_relaxed);
}

}  // namespace kvtier::tiers
