// The PagePin handle: one pin on an entry (StoreCore::PinLocked), dropped by
// SlotAccounts::Unpin, which frees a detached entry at its last pin. A PagePin
// may be dropped on any thread (a ZeroMQ I/O thread releasing a zero-copy
// frame), so unpinning only takes the entry's shard lock.
#include "kvtier/status_macros.h"
#include "tiers/store/internal/read_checks.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

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
  if (entry_ != nullptr) mgr_->impl_->slots->Unpin(entry_, hold_);
  mgr_ = nullptr;
  entry_ = nullptr;
  hold_ = false;
}

// The fields read below do not change while the entry is pinned: demotion
// only moves pages it alone has pinned.
// An empty pin reads as an empty host page.
TierKind PagePin::tier() const {
  return entry_ == nullptr ? TierKind::kHost : mgr_->impl_->core.tiers[entry_->tier]->tier->kind();
}
uint64_t PagePin::bytes() const { return entry_ == nullptr ? 0 : bytes_; }
uint64_t PagePin::checksum() const { return entry_ == nullptr ? 0 : entry_->checksum; }
Slot PagePin::slot() const { return entry_ == nullptr ? Slot{} : entry_->slot; }

const uint8_t* PagePin::data() const {
  if (entry_ == nullptr) return nullptr;
  return mgr_->impl_->core.tiers[entry_->tier]->tier->Address(entry_->slot);
}

void PagePin::CountReadOut() const {
  if (entry_ != nullptr) mgr_->impl_->core.CountOut(entry_->tier, bytes_);
}

absl::Status PagePin::CopyTo(void* dst) const {
  if (entry_ == nullptr) return absl::FailedPreconditionError("CopyTo on an empty PagePin");
  TierManager::Impl& m = *mgr_->impl_;
  const size_t t = entry_->tier;
  Tier& tier = *m.core.tiers[t]->tier;
  RETURN_IF_ERROR(m.checks->KnownCorrupt(entry_));
  if (absl::Status st = tier.Read(entry_->slot, 0, dst, entry_->slot.bytes); !st.ok())
    return st;
  return m.checks->VerifyRead(entry_, t, dst);
}

}  // namespace kvtier::tiers
