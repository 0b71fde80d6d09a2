// Entry lifetime: pins, the PagePin handle, freeing detached entries, and the
// parent links that make eviction leaf-first. A PagePin may be dropped on any
// thread (a ZeroMQ I/O thread releasing a zero-copy frame), so unpinning only
// takes the entry's shard lock.
#include "kvtier/status_macros.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

void TierManager::Impl::PinLocked(PageEntry* e) {
  if (e->pins++ == 0) tiers[e->tier]->pinned_pages.fetch_add(1, std::memory_order_relaxed);
}

bool TierManager::Impl::UnpinLocked(PageEntry* e) {
  if (--e->pins > 0) return false;
  tiers[e->tier]->pinned_pages.fetch_sub(1, std::memory_order_relaxed);
  return e->detached();
}

void TierManager::Impl::Unpin(PageEntry* e, bool hold) {
  IndexShard& shard = index.ShardFor(e->ns, e->key);
  bool free_now;
  {
    absl::MutexLock lock(&shard.mu);
    if (hold) --e->holds;
    free_now = UnpinLocked(e);
  }
  if (free_now) FreeEntry(e);
}

void TierManager::Impl::FreeEntry(PageEntry* e) {
  FreeBackup(e);
  ReleaseSlot(e->tier, e->ns, e->slot, MetaOf(e));
  entries.Delete(e);
}

void TierManager::Impl::DetachEntryLocked(IndexShard& shard, PageEntry* e) {
  if (e->clean()) {  // the counters cover indexed entries only
    tiers[e->tier]->clean_pages.fetch_sub(1, std::memory_order_relaxed);
    tiers[e->tier]->clean_page_bytes.fetch_sub(e->slot.bytes, std::memory_order_relaxed);
  }
  shard.DetachLocked(e);
  tiers[e->tier]->pages.fetch_sub(1, std::memory_order_relaxed);
  if (NamespaceState* ns = Ns(e->ns)) ns->pages.fetch_sub(1, std::memory_order_relaxed);
}

bool TierManager::Impl::AttachToParent(NamespaceId ns, const PageKey& parent) {
  IndexShard& shard = index.ShardFor(ns, parent);
  absl::MutexLock lock(&shard.mu);
  PageEntry* p = shard.FindLocked(ns, parent);
  if (p != nullptr) ++p->resident_children;
  return p != nullptr;
}

void TierManager::Impl::DetachFromParent(NamespaceId ns, const PageKey& parent) {
  IndexShard& shard = index.ShardFor(ns, parent);
  absl::MutexLock lock(&shard.mu);
  // The parent may have been replaced since the child counted itself; the
  // count is an eviction hint, so clamping at zero is enough.
  PageEntry* p = shard.FindLocked(ns, parent);
  if (p != nullptr && p->resident_children > 0) --p->resident_children;
}

void TierManager::Impl::TouchKey(NamespaceId ns, const PageKey& key) {
  IndexShard& shard = index.ShardFor(ns, key);
  absl::MutexLock lock(&shard.mu);
  if (PageEntry* e = shard.FindLocked(ns, key)) shard.TouchLocked(e, NextStamp());
}

PagePin::PagePin(TierManager* mgr, PageEntry* entry, bool hold)
    : mgr_(mgr), entry_(entry), hold_(hold), bytes_(entry->slot.bytes) {}

PagePin::PagePin(PagePin&& other) noexcept
    : mgr_(other.mgr_), entry_(other.entry_), hold_(other.hold_), bytes_(other.bytes_) {
  other.mgr_ = nullptr;
  other.entry_ = nullptr;
  other.hold_ = false;
}

PagePin& PagePin::operator=(PagePin&& other) noexcept {
  if (this != &other) {
    Reset();
    mgr_ = other.mgr_;
    entry_ = other.entry_;
    hold_ = other.hold_;
    bytes_ = other.bytes_;
    other.mgr_ = nullptr;
    other.entry_ = nullptr;
    other.hold_ = false;
  }
  return *this;
}

PagePin::~PagePin() { Reset(); }

void PagePin::Reset() {
  if (entry_ != nullptr) mgr_->impl_->Unpin(entry_, hold_);
  mgr_ = nullptr;
  entry_ = nullptr;
  hold_ = false;
}

// The fields read below do not change while the entry is pinned: demotion
// only moves pages it alone has pinned.
// An empty pin reads as an empty host page.
TierKind PagePin::tier() const {
  return entry_ == nullptr ? TierKind::kHost : mgr_->impl_->tiers[entry_->tier]->tier->kind();
}
uint64_t PagePin::bytes() const { return entry_ == nullptr ? 0 : bytes_; }
uint64_t PagePin::checksum() const { return entry_ == nullptr ? 0 : entry_->checksum; }
Slot PagePin::slot() const { return entry_ == nullptr ? Slot{} : entry_->slot; }

const uint8_t* PagePin::data() const {
  if (entry_ == nullptr) return nullptr;
  return mgr_->impl_->tiers[entry_->tier]->tier->Address(entry_->slot);
}

void PagePin::CountReadOut() const {
  if (entry_ != nullptr) mgr_->impl_->CountOut(entry_->tier, bytes_);
}

absl::Status PagePin::CopyTo(void* dst) const {
  if (entry_ == nullptr) return absl::FailedPreconditionError("CopyTo on an empty PagePin");
  TierManager::Impl& m = *mgr_->impl_;
  const size_t t = entry_->tier;
  Tier& tier = *m.tiers[t]->tier;
  RETURN_IF_ERROR(m.KnownCorrupt(entry_));
  if (absl::Status st = tier.Read(entry_->slot, 0, dst, entry_->slot.bytes); !st.ok())
    return st;
  return m.VerifyRead(entry_, t, dst);
}

PageMeta TierManager::Impl::MetaOf(const PageEntry* e) const {
  PageMeta m;
  if (const NamespaceState* ns = Ns(e->ns)) m.ns_name = ns->name;
  m.key = e->key;
  m.parent = e->parent;
  m.checksum = e->checksum;
  m.stamp = e->stamp;
  return m;
}

}  // namespace kvtier::tiers
