// Promotion as a mechanism for prefetch/: probing where a page lives, pinning
// it without counting a read, and moving it up to a chosen tier (not only the
// top one, so a host target stays right once an HBM tier sits above it).
// GET's own promote_on_get path stays in persistence.cc.
#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvtier/test_hooks.h"
#include "tiers/tier_manager.h"
#include "tiers/tier_manager_impl.h"

namespace kvtier::tiers {
namespace {

// Reads `old` from `lower` into `dst` of `upper`, through a bounce buffer
// when the upper tier is not host-addressable. Returns the xxh3 of the bytes
// when `want_checksum`, via *sum.
bool CopyUp(Tier& lower, const Slot& old, Tier& upper, const Slot& dst, bool want_checksum,
            uint64_t* sum) {
  if (uint8_t* p = upper.Address(dst)) {
    if (!lower.Read(old, 0, p, old.bytes).ok()) return false;
    if (want_checksum) *sum = XXH3_64bits(p, old.bytes);
    return true;
  }
  std::vector<uint8_t> bounce(old.bytes);
  if (!lower.Read(old, 0, bounce.data(), old.bytes).ok()) return false;
  if (want_checksum) *sum = XXH3_64bits(bounce.data(), old.bytes);
  return upper.Write(dst, 0, bounce.data(), old.bytes).ok();
}

}  // namespace

std::string_view PromoteOutcomeName(PromoteOutcome o) {
  switch (o) {
    case PromoteOutcome::kPromoted: return "promoted";
    case PromoteOutcome::kAlreadyThere: return "already_there";
    case PromoteOutcome::kMissing: return "missing";
    case PromoteOutcome::kBusy: return "busy";
    case PromoteOutcome::kNoRoom: return "no_room";
    case PromoteOutcome::kFailed: return "failed";
  }
  return "?";
}

int TierManager::TierIndex(TierKind kind) const {
  for (size_t t = 0; t < impl_->tiers.size(); ++t)
    if (impl_->tiers[t]->tier->kind() == kind) return static_cast<int>(t);
  return -1;
}

int TierManager::Locate(NamespaceId ns, const PageKey& key) const {
  if (impl_->Ns(ns) == nullptr) return -1;
  IndexShard& shard = impl_->index.ShardFor(ns, key);
  absl::MutexLock lock(&shard.mu);
  const PageEntry* e = shard.FindLocked(ns, key);
  return e == nullptr ? -1 : e->tier;
}

std::optional<PagePin> TierManager::PinForPromotion(NamespaceId ns, const PageKey& key) {
  if (impl_->Ns(ns) == nullptr) return std::nullopt;
  IndexShard& shard = impl_->index.ShardFor(ns, key);
  absl::MutexLock lock(&shard.mu);
  PageEntry* e = shard.FindLocked(ns, key);
  if (e == nullptr) return std::nullopt;
  impl_->PinLocked(e);
  // A page about to be read is hot: it must not be the next LRU victim.
  shard.TouchLocked(e, impl_->NextStamp());
  return PagePin(this, e);
}

PromoteOutcome TierManager::PromoteTo(PagePin& pin, size_t to) {
  Impl& m = *impl_;
  PageEntry* e = pin.entry_;
  if (e == nullptr) return PromoteOutcome::kMissing;
  if (to >= m.tiers.size()) return PromoteOutcome::kFailed;
  IndexShard& shard = m.index.ShardFor(e->ns, e->key);
  size_t from;
  {
    absl::MutexLock lock(&shard.mu);
    if (e->detached()) return PromoteOutcome::kMissing;
    if (e->tier <= to) return PromoteOutcome::kAlreadyThere;
    if (e->pins != 1) return PromoteOutcome::kBusy;
    from = e->tier;
  }
  const NamespaceId ns = e->ns;
  const Slot old = e->slot;  // stable: we hold the only pin
  if (!m.ChargeQuota(ns, to, old.bytes)) return PromoteOutcome::kNoRoom;
  absl::StatusOr<Slot> dst = m.AllocateWithEviction(to, old.bytes);
  if (!dst.ok()) {
    m.Uncharge(ns, to, old.bytes);
    return PromoteOutcome::kNoRoom;
  }
  Tier& upper = *m.tiers[to]->tier;
  Tier& lower = *m.tiers[from]->tier;
  uint64_t sum = 0;
  bool good = CopyUp(lower, old, upper, *dst, lower.persistent(), &sum);
  if (good && lower.persistent() && sum != e->checksum) {
    m.tiers[from]->checksum_errors.fetch_add(1, std::memory_order_relaxed);
    m.DropCorrupt(e);
    good = false;
  }
  // Tests stop here to race an eviction or a DELETE against the promotion
  // (the argument is the page's key).
  KVTIER_SYNC_POINT_CALLBACK("promote.after_read", const_cast<PageKey*>(&e->key));
  auto abandon = [&](PromoteOutcome why) {
    upper.Free(*dst);
    m.Uncharge(ns, to, old.bytes);
    return why;
  };
  if (!good) return abandon(PromoteOutcome::kFailed);
  bool keep = false;
  {
    absl::MutexLock lock(&shard.mu);
    if (e->detached()) return abandon(PromoteOutcome::kMissing);
    if (e->pins != 1 || e->tier != from) return abandon(PromoteOutcome::kBusy);
    // Our pin moves with the page.
    m.tiers[from]->pinned_pages.fetch_sub(1, std::memory_order_relaxed);
    m.tiers[to]->pinned_pages.fetch_add(1, std::memory_order_relaxed);
    m.tiers[from]->pages.fetch_sub(1, std::memory_order_relaxed);
    m.tiers[to]->pages.fetch_add(1, std::memory_order_relaxed);
    e->slot = *dst;
    shard.MoveTierLocked(e, static_cast<uint8_t>(to), m.NextStamp());
    // Write-through keeps the durable copy: the page stays restartable and
    // its next demotion costs nothing. Write-back frees it: backups cannot be
    // evicted, so under write-back they would shrink the NVMe tier by up to
    // the host tier's size.
    if (m.config.write_through && lower.persistent() && m.IsLastTier(from)) {
      e->backup = old;
      e->flags |= PageEntry::kHasBackup;
      keep = true;
    }
  }
  if (!keep) {
    if (lower.persistent()) lower.Unpersist(old, m.MetaOf(e));
    lower.Free(old);
    m.Uncharge(ns, from, old.bytes);
  }
  m.tiers[to]->promotions.fetch_add(1, std::memory_order_relaxed);
  m.KickEvictorIfHigh(to);
  return PromoteOutcome::kPromoted;
}

std::vector<PromoteResult> TierManager::PromoteBatch(NamespaceId ns,
                                                     absl::Span<const PageKey> keys, size_t to) {
  std::vector<PromoteResult> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<PagePin> pin = PinForPromotion(ns, keys[i]);
    if (!pin) continue;  // kMissing
    out[i].outcome = PromoteTo(*pin, to);
    if (out[i].outcome == PromoteOutcome::kPromoted ||
        out[i].outcome == PromoteOutcome::kAlreadyThere) {
      out[i].pin = *std::move(pin);
    }
  }
  return out;
}

}  // namespace kvtier::tiers
