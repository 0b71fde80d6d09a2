// Promotion as a mechanism for prefetch/: pinning a page without counting a
// read, and moving it up to a chosen tier (not only the top one, so a host
// target stays right once an HBM tier sits above it). Probes (Locate) and
// lease holds are in lookup.cc.
// GET's own path (ReadPage, ReadPages, promote_on_get) is in page_reads.cc;
// the move itself is the page-move primitive (page_move.cc).
#include <optional>
#include <vector>

#include "kvtier/test_hooks.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

std::optional<PagePin> TierManager::PinForPromotion(NamespaceId ns, const PageKey& key) {
  if (impl_->core.Ns(ns) == nullptr) return std::nullopt;
  IndexShard& shard = impl_->core.index.ShardFor(ns, key);
  absl::MutexLock lock(&shard.mu);
  PageEntry* e = shard.FindLocked(ns, key);
  if (e == nullptr) return std::nullopt;
  impl_->core.PinLocked(e);
  // A page about to be read is hot: it must not be the next LRU victim.
  shard.TouchLocked(e, impl_->core.NextStamp());
  return PagePin(this, e);
}

std::optional<PromoteOutcome> PageMover::CheckPromotable(PageEntry* e, size_t to) {
  if (to >= core_.tiers.size()) return PromoteOutcome::kFailed;
  IndexShard& shard = core_.index.ShardFor(e->ns, e->key);
  absl::MutexLock lock(&shard.mu);
  if (e->detached()) return PromoteOutcome::kMissing;
  if (e->tier <= to) return PromoteOutcome::kAlreadyThere;
  // Only the caller may be reading it; holds read nothing.
  if (e->pins - e->holds != 1) return PromoteOutcome::kBusy;
  return std::nullopt;
}

PromoteOutcome PageMover::FinishPromotion(PageMove& move) {
  // Tests stop here to race an eviction or a DELETE against the promotion
  // (the argument is the page's key).
  KVTIER_SYNC_POINT_CALLBACK("promote.after_read", const_cast<PageKey*>(&move.e->key));
  const bool corrupt = move.corrupt, copied = move.copied;
  if (FinishMove(move)) return PromoteOutcome::kPromoted;
  if (corrupt || !copied) return PromoteOutcome::kFailed;
  return move.detached ? PromoteOutcome::kMissing : PromoteOutcome::kBusy;
}

PromoteOutcome TierManager::PromoteTo(PagePin& pin, size_t to, EvictMode mode) {
  Impl& m = *impl_;
  PageEntry* e = pin.entry_;
  if (e == nullptr) return PromoteOutcome::kMissing;
  if (std::optional<PromoteOutcome> no = m.mover->CheckPromotable(e, to)) return *no;
  // A GET's promotion makes room only by dropping clean pages: it never
  // waits on a write-back. The prefetcher's threads may write one back.
  PageMove move = m.mover->BeginMove(e, to, MoveKind::kPromote, mode);
  if (!move.dst.ok()) return PromoteOutcome::kNoRoom;
  return m.mover->FinishPromotion(move);
}

std::vector<PromoteResult> TierManager::PromoteBatch(NamespaceId ns,
                                                     absl::Span<const PageKey> keys, size_t to,
                                                     EvictMode mode) {
  std::vector<PromoteResult> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<PagePin> pin = PinForPromotion(ns, keys[i]);
    if (!pin) continue;  // kMissing
    out[i].outcome = PromoteTo(*pin, to, mode);
    if (out[i].outcome == PromoteOutcome::kPromoted ||
        out[i].outcome == PromoteOutcome::kAlreadyThere) {
      out[i].pin = *std::move(pin);
    }
  }
  return out;
}

}  // namespace kvtier::tiers
