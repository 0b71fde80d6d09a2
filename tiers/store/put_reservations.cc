// The PUT path: the in-flight-put claim that makes a key's reservation
// unique, placement in the highest tier with room (charged and allocated by
// slot_charge.cc, making room only by dropping clean pages: no disk I/O),
// write-through copies, and the Reservation that carries a slot from Reserve
// to Commit.
// The checksum is computed in Fill when the page needs one (it lands on
// NVMe or keeps a write-through copy); RAM pages get theirs when cleaned.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kvtier/test_hooks.h"
#include "tiers/store/internal/evictor.h"
#include "tiers/store/internal/put_path.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

void KeyInFlight::OnResolved(Done done) {
  bool stored;
  {
    absl::MutexLock lock(&mu_);
    if (!resolved_) {
      waiting_.push_back(std::move(done));
      return;
    }
    stored = stored_;
  }
  std::move(done)(stored);
}

void KeyInFlight::Resolve(bool stored) {
  std::vector<Done> run;
  {
    absl::MutexLock lock(&mu_);
    resolved_ = true;
    stored_ = stored;
    run.swap(waiting_);
  }
  for (Done& done : run) std::move(done)(stored);
}

PutPath::Claim PutPath::ClaimKey(NamespaceId ns, const PageKey& key,
                                 std::shared_ptr<KeyInFlight>* other) {
  IndexShard& shard = core_.index.ShardFor(ns, key);
  absl::MutexLock lock(&shard.mu);
  if (PageEntry* e = shard.FindLocked(ns, key)) {
    e->flags |= PageEntry::kReused;
    shard.TouchLocked(e, core_.NextStamp(), /*reused=*/true);
    return Claim::kPresent;
  }
  if (std::shared_ptr<KeyInFlight>* h = shard.InFlightLocked(ns, key)) {
    if (*h == nullptr) *h = std::make_shared<KeyInFlight>();  // rare: a race on the key
    *other = *h;
    return Claim::kInFlight;
  }
  shard.AddInFlightLocked(ns, key);
  shard.PrefetchGhostLocked(ns, key);  // prefix: the insert asks it once the bytes are in
  return Claim::kClaimed;
}

void PutPath::ReleaseClaim(NamespaceId ns, const PageKey& key) {
  IndexShard& shard = core_.index.ShardFor(ns, key);
  std::shared_ptr<KeyInFlight> h;
  {
    absl::MutexLock lock(&shard.mu);
    h = shard.RemoveInFlightLocked(ns, key);
  }
  if (h != nullptr) h->Resolve(/*stored=*/false);
}

absl::StatusOr<Slot> PutPath::ReserveIn(NamespaceId ns, size_t t, uint64_t bytes) {
  // The request path never writes to disk: room is made by dropping clean
  // pages only, and a tier that has none asks the evictor to clean.
  absl::StatusOr<Slot> slot = slots_.ChargeAndAllocate(ns, t, bytes, EvictMode::kCleanOnly);
  if (!slot.ok()) {
    if (core_.Ns(ns)->quota[t] != 0) evictor_.RequestClean(ns, t);
    evictor_.KickEvictor(t);
    return slot;
  }
  evictor_.KickEvictorIfHigh(t);
  return slot;
}

absl::StatusOr<std::optional<Slot>> PutPath::ReserveBackup(NamespaceId ns, size_t t,
                                                           uint64_t bytes) {
  const size_t last = core_.backup_tier;
  if (!core_.config.write_through || !core_.HasBackupTier() || t >= last) return std::nullopt;
  absl::StatusOr<Slot> slot = slots_.ChargeAndAllocate(ns, last, bytes, EvictMode::kCleanOnly);
  if (!slot.ok()) {
    evictor_.KickEvictor(last);
    return absl::ResourceExhaustedError(absl::StrCat(
        "write-through copy on ", std::string(TierName(core_.tiers[last]->tier->kind())), ": ",
        slot.status().message()));
  }
  return std::optional<Slot>(*slot);
}

void PutPath::Commit(NamespaceId ns, const PageKey& key, const PageKey& parent, size_t t,
                     const Slot& slot, uint64_t checksum, const Slot* backup) {
  PageEntry* e = core_.entries.New(key, parent);
  e->slot = slot;
  e->checksum = checksum;
  e->ns = ns;
  e->tier = static_cast<uint8_t>(t);
  // Count ourselves in the parent before becoming visible, so an evictor
  // never sees this page without its parent knowing it has a child.
  if (!parent.IsZero() && core_.AttachToParent(ns, parent)) e->flags |= PageEntry::kCountedInParent;
  KVTIER_SYNC_POINT_CALLBACK("reservation.before_publish", const_cast<PageKey*>(&key));
  IndexShard& shard = core_.index.ShardFor(ns, key);
  std::shared_ptr<KeyInFlight> h;
  {
    absl::MutexLock lock(&shard.mu);
    // The claim kept every other PUT of this key out since Reserve.
    h = shard.RemoveInFlightLocked(ns, key);
    shard.InsertLocked(e, core_.NextStamp());
    if (backup != nullptr) core_.SetBackupLocked(shard, e, *backup);
    core_.tiers[t]->pages.fetch_add(1, std::memory_order_relaxed);
    NamespaceState& s = *core_.Ns(ns);
    s.pages.fetch_add(1, std::memory_order_relaxed);
    s.puts.fetch_add(1, std::memory_order_relaxed);
  }
  // PUTs deduplicated against this one may now promise the page.
  if (h != nullptr) h->Resolve(/*stored=*/true);
}

absl::StatusOr<ReserveResult> TierManager::Reserve(NamespaceId ns, const PageKey& key,
                                                   const PageKey& parent, uint64_t bytes) {
  NamespaceState* state = impl_->core.Ns(ns);
  if (state == nullptr) return absl::NotFoundError(absl::StrCat("unknown namespace id ", ns));
  if (bytes == 0 || bytes > MaxPageBytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("page of ", bytes, " bytes: pages must be 1 to ", MaxPageBytes(), " bytes"));
  }
  ReserveResult result;
  switch (impl_->puts->ClaimKey(ns, key, &result.in_flight)) {
    case PutPath::Claim::kPresent:
      // Re-touch the parent so it stays newer than this child (leaf-first).
      if (!parent.IsZero()) impl_->core.TouchKey(ns, parent);
      [[fallthrough]];
    case PutPath::Claim::kInFlight:
      // Another PUT of this key holds its claim: it stores the page, and
      // result.in_flight says when (or that it gave up). Two reservations
      // of one key never coexist.
      state->dedup_puts.fetch_add(1, std::memory_order_relaxed);
      result.outcome = PutOutcome::kDeduplicated;
      return result;
    case PutPath::Claim::kClaimed:
      break;
  }
  std::string why;
  for (size_t t = 0; t < impl_->core.tiers.size(); ++t) {
    absl::StatusOr<Slot> slot = impl_->puts->ReserveIn(ns, t, bytes);
    absl::StatusOr<std::optional<Slot>> backup = slot.ok()
                                                     ? impl_->puts->ReserveBackup(ns, t, bytes)
                                                     : absl::StatusOr<std::optional<Slot>>();
    if (slot.ok() && !backup.ok()) {
      impl_->slots->FreeSlot(t, ns, *slot);
      slot = backup.status();
    }
    if (!slot.ok()) {
      absl::StrAppend(&why, why.empty() ? "" : "; ",
                      std::string(TierName(impl_->core.tiers[t]->tier->kind())), " tier ", t, ": ",
                      slot.status().message());
      continue;
    }
    Reservation& r = result.reservation;
    r.mgr_ = this;  // from here the reservation owns the claim
    r.ns_ = ns;
    r.key_ = key;
    r.parent_ = parent;
    r.tier_ = impl_->core.tiers[t]->tier->kind();
    r.tier_index_ = t;
    r.slot_ = *slot;
    r.bytes_ = bytes;
    if (backup->has_value()) {
      r.backup_ = **backup;
      r.has_backup_ = true;
    }
    return result;
  }
  impl_->puts->ReleaseClaim(ns, key);
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
  mgr_->impl_->puts->ReleaseClaim(ns_, key_);
  // No record points at these slots: CommitAll writes records only for
  // reservations it publishes.
  if (has_backup_) {
    mgr_->impl_->slots->FreeSlot(mgr_->impl_->core.backup_tier, ns_, backup_);
    has_backup_ = false;
  }
  mgr_->impl_->slots->FreeSlot(tier_index_, ns_, slot_);
  mgr_ = nullptr;
}

uint8_t* Reservation::data() {
  return mgr_ == nullptr ? nullptr : mgr_->impl_->core.tiers[tier_index_]->tier->Address(slot_);
}

absl::Status Reservation::Fill(const void* src) { return FillImpl(src, /*publish=*/true); }

absl::Status Reservation::FillFetched(const void* src) { return FillImpl(src, /*publish=*/false); }

absl::Status Reservation::FillImpl(const void* src, bool publish) {
  if (mgr_ == nullptr) return absl::FailedPreconditionError("Fill on an empty Reservation");
  Tier& tier = *mgr_->impl_->core.tiers[tier_index_]->tier;
  // One copy. The checksum is only needed once the bytes leave this
  // process's memory (NVMe), so RAM tiers skip it here and the demotion to
  // NVMe computes it, off the request path.
  if (auto s = tier.Write(slot_, 0, src, bytes_); !s.ok()) return s;
  if (tier.persistent() || has_backup_) checksum_ = XXH3_64bits(src, bytes_);
  if (has_backup_) {
    Tier& last = *mgr_->impl_->core.tiers[mgr_->impl_->core.backup_tier]->tier;
    if (auto s = last.Write(backup_, 0, src, bytes_); !s.ok()) return s;
  }
  if (publish) PublishShared(src);
  filled_ = true;
  return absl::OkStatus();
}

// Published when filled, before the commit: a page whose commit then fails
// is still the page its key names (keys are prefix hashes), so the record
// is right either way, and publishing here needs no second read of a page
// that landed on NVMe.
void Reservation::PublishShared(const void* bytes) const {
  if (!PublishesShared()) return;
  const TierManager::Impl& m = *mgr_->impl_;
  if (const NamespaceState* state = m.core.Ns(ns_))
    m.core.shared->Publish(state->name, key_, parent_, bytes, bytes_);
}

bool Reservation::PublishesShared() const {
  return mgr_ != nullptr && mgr_->impl_->core.shared != nullptr &&
         mgr_->impl_->core.config.shared_write_through;
}

// A device slot (HBM) has no host address: a page that must be published
// (or checksummed) is handed over on the host, through Fill.
bool Reservation::NeedsHostBytes() const {
  return mgr_ != nullptr && (mgr_->impl_->core.tiers[tier_index_]->tier->persistent() ||
                             has_backup_ || PublishesShared());
}

absl::Status Reservation::MarkFilled() {
  if (mgr_ == nullptr) return absl::FailedPreconditionError("MarkFilled on an empty Reservation");
  if (NeedsHostBytes())
    return absl::FailedPreconditionError(
        "MarkFilled: this page needs a checksum or a write-through copy; use Fill");
  mgr_->impl_->core.CountIn(tier_index_, bytes_);  // the caller's copy (or DMA) went past the tier
  filled_ = true;
  return absl::OkStatus();
}

bool Reservation::FetchesInPlace() const {
  if (mgr_ == nullptr) return false;
  Tier& tier = *mgr_->impl_->core.tiers[tier_index_]->tier;
  return !tier.persistent() && !has_backup_ && tier.Address(slot_) != nullptr;
}

absl::Status Reservation::MarkFetched() {
  if (!FetchesInPlace())
    return absl::FailedPreconditionError(
        "MarkFetched: this page needs its bytes on the host (a checksum or a durable copy); "
        "use FillFetched");
  mgr_->impl_->core.CountIn(tier_index_,
                            bytes_);  // fetched straight into data()
  filled_ = true;
  return absl::OkStatus();
}

Tier* Reservation::DurableTier(Slot* slot) const {
  const auto& tiers = mgr_->impl_->core.tiers;
  if (tiers[tier_index_]->tier->persistent()) {
    *slot = slot_;  // landed straight on NVMe (RAM was full)
    return tiers[tier_index_]->tier.get();
  }
  if (has_backup_) {
    *slot = backup_;  // write-through copy
    return tiers[mgr_->impl_->core.backup_tier]->tier.get();
  }
  return nullptr;
}

bool Reservation::Commit() {
  std::vector<Reservation> one;
  one.push_back(std::move(*this));
  return CommitAll(one).stored == 1;
}

CommitResult Reservation::CommitAll(std::vector<Reservation>& rs) {
  CommitResult result;
  result.stored_each.assign(rs.size(), false);
  auto refuse = [&result](Reservation& r, absl::Status why) {
    ++result.not_stored;
    if (result.error.ok()) result.error = std::move(why);
    if (r.mgr_ != nullptr)
      r.mgr_->impl_->core.tiers[r.tier_index_]->durability_failures.fetch_add(1);
    r.Release();
  };
  // Every durable copy (pages on NVMe, write-through copies) is recorded
  // with one sync and one index write, before any page becomes visible.
  std::vector<Slot> slots;
  std::vector<PageMeta> metas;
  Tier* target = nullptr;  // the persistent tier of this commit
  for (Reservation& r : rs) {
    if (r.mgr_ == nullptr) continue;
    if (!r.filled_) {
      refuse(r, absl::FailedPreconditionError("page reserved but never filled"));
      continue;
    }
    Slot slot;
    Tier* tier = r.DurableTier(&slot);
    if (tier == nullptr) continue;
    if (target != nullptr && target != tier) {
      refuse(r, absl::InternalError("pages of one commit on two persistent tiers"));
      continue;
    }
    target = tier;
    slots.push_back(slot);
    metas.push_back(
        PageMeta{r.mgr_->impl_->core.Ns(r.ns_)->name, r.key_, r.parent_, r.checksum_, 0});
  }
  absl::Status persisted = absl::OkStatus();
  if (!slots.empty()) {
    persisted = target->durable()->PersistBatch(slots, metas);
    if (persisted.ok()) KVTIER_KILL_POINT("commit.after_persist");
  }
  // Parents first, so each child finds its parent in the index and counts
  // itself there (leaf-first eviction needs the count)...
  std::vector<std::pair<NamespaceId, PageKey>> published;
  TierManager* mgr = nullptr;
  for (size_t i = 0; i < rs.size(); ++i) {
    Reservation& r = rs[i];
    if (r.mgr_ == nullptr) continue;
    Slot unused;
    if (!persisted.ok() && r.DurableTier(&unused) != nullptr) {
      // Never a dedup: the page is not stored, and the caller says why.
      refuse(r, absl::Status(persisted.code(),
                             absl::StrCat("making the page durable failed: ", persisted.message())));
      continue;
    }
    mgr = r.mgr_;
    published.emplace_back(r.ns_, r.key_);
    r.Publish();
    ++result.stored;
    result.stored_each[i] = true;
  }
  // ...then recency tail-first: a chain's ancestors end up more recent than
  // its descendants.
  for (size_t i = published.size(); i-- > 0;) {
    mgr->impl_->core.TouchKey(published[i].first, published[i].second);
  }
  return result;
}

void Reservation::Publish() {
  mgr_->impl_->puts->Commit(ns_, key_, parent_, tier_index_, slot_, checksum_,
                            has_backup_ ? &backup_ : nullptr);
  mgr_ = nullptr;  // the slot, backup, quota bytes and claim now belong to the entry
  has_backup_ = false;
}

}  // namespace kvtier::tiers
