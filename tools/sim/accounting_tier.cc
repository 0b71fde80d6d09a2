// AccountingTier: slot bookkeeping without bytes. Every page reads back as
// zeros, which is what the sim writes, so the checksums TierManager takes on
// demotion and checks on promotion always agree.
#include "tools/sim/accounting_tier.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier::sim {
namespace {

// The one page every host slot "holds". Writes are dropped and reads return
// zeros, so it stays zero.
alignas(64) uint8_t g_scratch[kSimPageBytes];

uint64_t RoundUp(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

}  // namespace

TierSize PagesTier(uint64_t pages) { return TierSize{pages, static_cast<double>(pages)}; }

absl::StatusOr<TierSize> BytesTier(uint64_t bytes, uint64_t page_bytes, uint64_t slab_bytes,
                                   uint64_t slot_align) {
  if (page_bytes == 0) return absl::InvalidArgumentError("page_bytes must be > 0");
  if (slot_align == 0) return absl::InvalidArgumentError("slot alignment must be > 0");
  const uint64_t slot = RoundUp(page_bytes, slot_align);
  if (slab_bytes < slot) {
    return absl::InvalidArgumentError(absl::StrCat("a page of ", page_bytes, " bytes (slot ", slot,
                                                   ") does not fit a slab of ", slab_bytes));
  }
  const uint64_t slabs = bytes / slab_bytes;
  if (slabs == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tier of ", bytes, " bytes is smaller than one slab (", slab_bytes, ")"));
  }
  TierSize s;
  s.slots = slabs * (slab_bytes / slot);
  // The arena's capacity is whole slabs; watermarks are fractions of it.
  s.capacity_pages = static_cast<double>(slabs * slab_bytes) / static_cast<double>(slot);
  return s;
}

absl::StatusOr<std::unique_ptr<AccountingTier>> AccountingTier::Create(tiers::TierKind kind,
                                                                       const TierSize& size) {
  if (size.slots == 0) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(tiers::TierName(kind)),
                                                   " tier: capacity must be at least one page"));
  }
  if (size.capacity_pages < static_cast<double>(size.slots)) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(tiers::TierName(kind)),
                                                   " tier: capacity ", size.capacity_pages,
                                                   " pages is below its ", size.slots, " slots"));
  }
  return std::unique_ptr<AccountingTier>(new AccountingTier(kind, size));
}

AccountingTier::AccountingTier(tiers::TierKind kind, const TierSize& size)
    : tiers::Tier(kind == tiers::TierKind::kNvme ? static_cast<tiers::DurableIndex*>(this)
                                                 : nullptr),
      kind_(kind),
      slots_(size.slots),
      capacity_bytes_(static_cast<uint64_t>(std::llround(size.capacity_pages * kSimPageBytes))),
      allocated_(size.slots, false) {}

std::string AccountingTier::backing() const {
  return absl::StrCat("kvtier-sim accounting (", slots_, " pages, no bytes)");
}

absl::StatusOr<tiers::Slot> AccountingTier::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > kSimPageBytes) {
    ++alloc_failures_;
    return absl::InvalidArgumentError(
        absl::StrCat("cannot allocate ", bytes, " bytes (sim pages are ", kSimPageBytes, ")"));
  }
  uint64_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else if (next_fresh_ < slots_) {
    index = next_fresh_++;
  } else {
    ++alloc_failures_;
    return absl::ResourceExhaustedError(absl::StrCat("all ", slots_, " pages in use"));
  }
  allocated_[index] = true;
  ++used_;
  return tiers::Slot{index * kSimPageBytes, static_cast<uint32_t>(bytes), 0};
}

void AccountingTier::Free(const tiers::Slot& slot) {
  const uint64_t index = slot.offset / kSimPageBytes;
  if (slot.offset % kSimPageBytes != 0 || index >= slots_ || !allocated_[index]) {
    ++bad_frees_;
    return;
  }
  allocated_[index] = false;
  free_.push_back(index);
  --used_;
}

uint8_t* AccountingTier::Address(const tiers::Slot& slot) {
  return persistent() ? nullptr : g_scratch;
}

std::pair<uint8_t*, uint64_t> AccountingTier::Region() {
  if (persistent()) return {nullptr, 0};
  return {g_scratch, kSimPageBytes};
}

absl::Status AccountingTier::CheckRange(const tiers::Slot& slot, uint64_t offset,
                                        uint64_t n) const {
  const uint64_t index = slot.offset / kSimPageBytes;
  if (index >= slots_ || !allocated_[index] || offset + n > slot.bytes) {
    return absl::OutOfRangeError(absl::StrCat(std::string(tiers::TierName(kind_)), " slot at ",
                                              slot.offset, ": [", offset, ", ", offset + n,
                                              ") is outside the allocated page"));
  }
  return absl::OkStatus();
}

absl::Status AccountingTier::Write(const tiers::Slot& slot, uint64_t offset, const void* src,
                                   uint64_t n) {
  if (absl::Status st = CheckRange(slot, offset, n); !st.ok()) return st;
  counters_.bytes_written += n;  // counted, not kept
  return absl::OkStatus();
}

void AccountingTier::ReadRangeAsync(const tiers::Slot& slot, uint64_t offset, uint64_t n,
                                    void* dst, uint64_t dst_room, ReadDone done) {
  absl::Status st = CheckRange(slot, offset, n);
  if (st.ok() && dst_room < n) st = absl::OutOfRangeError("read into a smaller buffer");
  if (st.ok()) {
    std::memset(dst, 0, n);  // no bytes are kept
    counters_.bytes_read += n;
  }
  done(std::move(st));
}

}  // namespace kvtier::sim
