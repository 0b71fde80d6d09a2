// The PUT path: dedup, per-namespace quotas, placement in the highest tier
// with room (evicting when full), and the Reservation that carries a slot
// from Reserve to Commit. The checksum is computed while the bytes are
// copied in, so it costs one pass over data that is already in cache.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tiers/tier_manager.h"
#include "tiers/tier_manager_impl.h"

namespace kvtier::tiers {
namespace {

}  // namespace

bool TierManager::Impl::TryCharge(NamespaceState& ns, size_t t, uint64_t bytes) {
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

void TierManager::Impl::Uncharge(NamespaceId ns, size_t t, uint64_t bytes) {
  if (NamespaceState* s = Ns(ns)) s->tier_bytes[t].fetch_sub(bytes, std::memory_order_relaxed);
}

bool TierManager::Impl::ChargeQuota(NamespaceId ns, size_t t, uint64_t bytes) {
  NamespaceState& s = *Ns(ns);
  if (s.quota[t] != 0 && bytes > s.quota[t]) return false;
  // Only this namespace's own pages make room under its quota; another
  // namespace's pages are never evicted on its behalf.
  while (!TryCharge(s, t, bytes)) {
    if (EvictOne(t, ns) == 0) return false;
    s.quota_evictions.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

absl::StatusOr<Slot> TierManager::Impl::AllocateWithEviction(size_t t, uint64_t bytes,
                                                              bool evict) {
  Tier& tier = *tiers[t]->tier;
  // Bounded: with mixed page sizes, freeing a slab may take many evictions,
  // but a request must never spin; the evictor keeps headroom normally.
  const uint64_t max_evictions = uint64_t{config.eviction_batch} * 4;
  for (uint64_t evicted = 0;; ++evicted) {
    absl::StatusOr<Slot> slot = tier.Allocate(bytes);
    if (slot.ok() || !absl::IsResourceExhausted(slot.status())) return slot;
    if (!evict) return slot;
    if (evicted >= max_evictions || EvictOne(t, 0) == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "full (", tier.used_bytes(), " of ", tier.capacity_bytes(), " bytes used, ", evicted,
          " pages evicted, the rest pinned or busy): ", slot.status().message()));
    }
  }
}

bool TierManager::Impl::Dedup(NamespaceId ns, const PageKey& key, const PageKey& parent) {
  {
    IndexShard& shard = index.ShardFor(ns, key);
    absl::MutexLock lock(&shard.mu);
    PageEntry* e = shard.FindLocked(ns, key);
    if (e == nullptr) return false;
    e->flags |= PageEntry::kReused;
    shard.TouchLocked(e, NextStamp());
  }
  // Re-touch the parent so it stays newer than this child (leaf-first).
  if (!parent.IsZero()) TouchKey(ns, parent);
  return true;
}

absl::StatusOr<Slot> TierManager::Impl::ReserveIn(NamespaceId ns, size_t t, uint64_t bytes,
                                                   bool evict) {
  if (!ChargeQuota(ns, t, bytes)) {
    const NamespaceState& s = *Ns(ns);
    return absl::ResourceExhaustedError(absl::StrCat("over quota (", s.tier_bytes[t].load(), " of ",
                                                     s.quota[t],
                                                     " bytes used, own pages pinned or too few)"));
  }
  absl::StatusOr<Slot> slot = AllocateWithEviction(t, bytes, evict);
  if (!slot.ok()) {
    Uncharge(ns, t, bytes);
    if (!evict) KickEvictor(t);
    return slot.status();
  }
  KickEvictorIfHigh(t);
  return slot;
}

std::optional<Slot> TierManager::Impl::ReserveBackup(NamespaceId ns, size_t t, uint64_t bytes) {
  const size_t last = tiers.size() - 1;
  if (!config.write_through || t == last || !tiers[last]->tier->persistent()) return std::nullopt;
  if (!ChargeQuota(ns, last, bytes)) return std::nullopt;
  absl::StatusOr<Slot> slot = AllocateWithEviction(last, bytes);
  if (!slot.ok()) {
    Uncharge(ns, last, bytes);
    return std::nullopt;  // no room: this page is write-back
  }
  return *slot;
}

void TierManager::Impl::FreeBackup(PageEntry* e) {
  if (!(e->flags & PageEntry::kHasBackup)) return;
  Tier& last = *tiers.back()->tier;
  last.Unpersist(e->backup, MetaOf(e));
  last.Free(e->backup);
  Uncharge(e->ns, tiers.size() - 1, e->backup.bytes);
  e->flags &= ~PageEntry::kHasBackup;
}

bool TierManager::Impl::Commit(NamespaceId ns, const PageKey& key, const PageKey& parent, size_t t,
                               const Slot& slot, uint64_t checksum, const Slot* backup) {
  auto* e = new PageEntry{key, parent};
  e->slot = slot;
  if (backup != nullptr) {
    e->backup = *backup;
    e->flags |= PageEntry::kHasBackup;
  }
  e->checksum = checksum;
  e->ns = ns;
  e->tier = static_cast<uint8_t>(t);
  // Count ourselves in the parent before becoming visible, so an evictor
  // never sees this page without its parent knowing it has a child.
  if (!parent.IsZero() && AttachToParent(ns, parent)) e->flags |= PageEntry::kCountedInParent;
  IndexShard& shard = index.ShardFor(ns, key);
  {
    absl::MutexLock lock(&shard.mu);
    if (shard.FindLocked(ns, key) == nullptr) {
      shard.InsertLocked(e, NextStamp());
      tiers[t]->pages.fetch_add(1, std::memory_order_relaxed);
      NamespaceState& s = *Ns(ns);
      s.pages.fetch_add(1, std::memory_order_relaxed);
      s.puts.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  if (e->flags & PageEntry::kCountedInParent) DetachFromParent(ns, parent);
  delete e;
  return false;
}

absl::StatusOr<ReserveResult> TierManager::Reserve(NamespaceId ns, const PageKey& key,
                                                   const PageKey& parent, uint64_t bytes) {
  NamespaceState* state = impl_->Ns(ns);
  if (state == nullptr) return absl::NotFoundError(absl::StrCat("unknown namespace id ", ns));
  if (bytes == 0 || bytes > MaxPageBytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("page of ", bytes, " bytes: pages must be 1 to ", MaxPageBytes(), " bytes"));
  }
  ReserveResult result;
  if (impl_->Dedup(ns, key, parent)) {
    state->dedup_puts.fetch_add(1, std::memory_order_relaxed);
    result.outcome = PutOutcome::kDeduplicated;
    return result;
  }
  std::string why;
  for (size_t t = 0; t < impl_->tiers.size(); ++t) {
    absl::StatusOr<Slot> slot = impl_->ReserveIn(ns, t, bytes, impl_->EvictsInline(t));
    if (!slot.ok()) {
      absl::StrAppend(&why, why.empty() ? "" : "; ",
                      std::string(TierName(impl_->tiers[t]->tier->kind())), " tier ", t, ": ",
                      slot.status().message());
      continue;
    }
    Reservation& r = result.reservation;
    r.mgr_ = this;
    r.ns_ = ns;
    r.key_ = key;
    r.parent_ = parent;
    r.tier_ = impl_->tiers[t]->tier->kind();
    r.tier_index_ = t;
    r.slot_ = *slot;
    r.bytes_ = bytes;
    if (std::optional<Slot> b = impl_->ReserveBackup(ns, t, bytes)) {
      r.backup_ = *b;
      r.has_backup_ = true;
    }
    return result;
  }
  return absl::ResourceExhaustedError(absl::StrCat("namespace '", state->name,
                                                   "': no room for a page of ", bytes,
                                                   " bytes in any tier (", why, ")"));
}

Reservation::Reservation(Reservation&& other) noexcept { *this = std::move(other); }

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this == &other) return *this;
  Release();
  mgr_ = std::exchange(other.mgr_, nullptr);
  ns_ = other.ns_;
  key_ = other.key_;
  parent_ = other.parent_;
  tier_ = other.tier_;
  tier_index_ = other.tier_index_;
  slot_ = other.slot_;
  bytes_ = other.bytes_;
  checksum_ = other.checksum_;
  filled_ = other.filled_;
  backup_ = other.backup_;
  has_backup_ = std::exchange(other.has_backup_, false);
  return *this;
}

Reservation::~Reservation() { Release(); }

void Reservation::Release() {
  if (mgr_ == nullptr) return;
  if (has_backup_) {
    const size_t last = mgr_->impl_->tiers.size() - 1;
    mgr_->impl_->tiers[last]->tier->Free(backup_);
    mgr_->impl_->Uncharge(ns_, last, bytes_);
    has_backup_ = false;
  }
  mgr_->impl_->tiers[tier_index_]->tier->Free(slot_);
  mgr_->impl_->Uncharge(ns_, tier_index_, bytes_);
  mgr_ = nullptr;
}

uint8_t* Reservation::data() {
  return mgr_ == nullptr ? nullptr : mgr_->impl_->tiers[tier_index_]->tier->Address(slot_);
}

absl::Status Reservation::Fill(const void* src) {
  if (mgr_ == nullptr) return absl::FailedPreconditionError("Fill on an empty Reservation");
  Tier& tier = *mgr_->impl_->tiers[tier_index_]->tier;
  // One copy. The checksum is only needed once the bytes leave this
  // process's memory (NVMe), so RAM tiers skip it here and the demotion to
  // NVMe computes it, off the request path.
  if (auto s = tier.Write(slot_, 0, src, bytes_); !s.ok()) return s;
  if (tier.persistent() || has_backup_) checksum_ = XXH3_64bits(src, bytes_);
  if (has_backup_) {
    Tier& last = *mgr_->impl_->tiers.back()->tier;
    if (auto s = last.Write(backup_, 0, src, bytes_); !s.ok()) return s;
  }
  filled_ = true;
  return absl::OkStatus();
}

bool Reservation::NeedsHostBytes() const {
  return mgr_ != nullptr && (mgr_->impl_->tiers[tier_index_]->tier->persistent() || has_backup_);
}

absl::Status Reservation::MarkFilled() {
  if (mgr_ == nullptr) return absl::FailedPreconditionError("MarkFilled on an empty Reservation");
  if (NeedsHostBytes())
    return absl::FailedPreconditionError(
        "MarkFilled: this page needs a checksum or a write-through copy; use Fill");
  filled_ = true;
  return absl::OkStatus();
}

Tier* Reservation::DurableTier(Slot* slot) const {
  const auto& tiers = mgr_->impl_->tiers;
  if (tiers[tier_index_]->tier->persistent()) {
    *slot = slot_;  // landed straight on NVMe (RAM was full)
    return tiers[tier_index_]->tier.get();
  }
  if (has_backup_) {
    *slot = backup_;  // write-through copy
    return tiers.back()->tier.get();
  }
  return nullptr;
}

bool Reservation::Commit() {
  std::vector<Reservation> one;
  one.push_back(std::move(*this));
  return CommitAll(one) == 1;
}

size_t Reservation::CommitAll(std::vector<Reservation>& rs) {
  // Every durable copy (pages on NVMe, write-through copies) is recorded
  // with one sync and one index write, before any page becomes visible.
  std::vector<Slot> slots;
  std::vector<PageMeta> metas;
  Tier* durable = nullptr;
  for (Reservation& r : rs) {
    if (r.mgr_ == nullptr) continue;
    Slot slot;
    Tier* tier = r.DurableTier(&slot);
    if (tier == nullptr) continue;
    if (!r.filled_ || (durable != nullptr && durable != tier)) {
      r.Release();  // nothing durable to publish
      continue;
    }
    durable = tier;
    slots.push_back(slot);
    metas.push_back(PageMeta{r.mgr_->impl_->Ns(r.ns_)->name, r.key_, r.parent_, r.checksum_, 0});
  }
  const bool persisted = slots.empty() || durable->PersistBatch(slots, metas).ok();
  size_t stored = 0;
  // Parents first, so each child finds its parent in the index and counts
  // itself there (leaf-first eviction needs the count)...
  std::vector<std::pair<NamespaceId, PageKey>> published;
  TierManager* mgr = nullptr;
  for (Reservation& r : rs) {
    if (r.mgr_ == nullptr) continue;
    Slot unused;
    if (!persisted && r.DurableTier(&unused) != nullptr) {
      r.Release();
      continue;
    }
    TierManager* m = r.mgr_;
    const std::pair<NamespaceId, PageKey> id{r.ns_, r.key_};
    if (r.Publish()) {
      ++stored;
      mgr = m;
      published.push_back(id);
    }
  }
  // ...then recency tail-first: a chain's ancestors end up more recent than
  // its descendants.
  for (size_t i = published.size(); i-- > 0;) {
    mgr->impl_->TouchKey(published[i].first, published[i].second);
  }
  return stored;
}

bool Reservation::Publish() {
  if (!mgr_->impl_->Commit(ns_, key_, parent_, tier_index_, slot_, checksum_,
                           has_backup_ ? &backup_ : nullptr)) {
    // Another PUT of this key won: dedup. Our durable record shares its key;
    // the winner's copy is the page, so only our slots go.
    Release();
    return false;
  }
  mgr_ = nullptr;  // the slot and its quota bytes now belong to the entry
  return true;
}

}  // namespace kvtier::tiers
