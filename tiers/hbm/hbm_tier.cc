// HbmTier over a device page pool; see hbm_tier.h.
#include "tiers/hbm/hbm_tier.h"

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "tiers/common/slab_arena.h"

namespace kvtier::tiers {

absl::Status HbmTierConfig::Validate() const {
  if (slab_bytes == 0 || slab_bytes % SlabArena::kSlotAlign != 0 || slab_bytes > UINT32_MAX)
    return absl::InvalidArgumentError(absl::StrCat("hbm tier slab_bytes ", slab_bytes,
                                                   " must be a non-zero multiple of ",
                                                   SlabArena::kSlotAlign, " below 4 GiB"));
  if (capacity_bytes < slab_bytes)
    return absl::InvalidArgumentError(absl::StrCat("hbm tier capacity_bytes ", capacity_bytes,
                                                   " is below one slab (", slab_bytes, ")"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HbmTier>> HbmTier::Create(const HbmTierConfig& config,
                                                         std::shared_ptr<hbm::Device> device) {
  if (device == nullptr) return absl::InvalidArgumentError("hbm tier needs a device");
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(auto arena, SlabArena::Create(config.capacity_bytes, config.slab_bytes));
  ASSIGN_OR_RETURN(void* pool, device->Allocate(arena->capacity(), /*exportable=*/false));
  return std::unique_ptr<HbmTier>(
      new HbmTier(std::move(device), static_cast<uint8_t*>(pool), std::move(arena)));
}

HbmTier::HbmTier(std::shared_ptr<hbm::Device> device, uint8_t* pool,
                 std::unique_ptr<SlabArena> arena)
    : device_(std::move(device)), pool_(pool), arena_(std::move(arena)) {}

HbmTier::~HbmTier() { device_->Free(pool_); }

std::string HbmTier::backing() const { return device_->description(); }
uint64_t HbmTier::capacity_bytes() const { return arena_->capacity(); }
uint64_t HbmTier::used_bytes() const { return arena_->used_bytes(); }
uint64_t HbmTier::max_slot_bytes() const { return arena_->slab_bytes(); }

absl::StatusOr<Slot> HbmTier::Allocate(uint64_t bytes) {
  auto slot = arena_->Allocate(bytes);
  if (!slot.ok()) alloc_failures_.fetch_add(1, std::memory_order_relaxed);
  return slot;
}

void HbmTier::Free(const Slot& slot) { arena_->Free(slot); }

int HbmTier::NextStream() {
  return static_cast<int>(stream_rr_.fetch_add(1, std::memory_order_relaxed));
}

absl::Status HbmTier::Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) {
  RETURN_IF_ERROR(CheckRange(slot, offset, n));
  RETURN_IF_ERROR(device_->Copy(hbm::CopyKind::kHostToDevice,
                                {{DevicePtr(slot) + offset, src, n}}, NextStream()));
  bytes_written_.fetch_add(n, std::memory_order_relaxed);
  return absl::OkStatus();
}

void HbmTier::ReadRangeAsync(const Slot& slot, uint64_t offset, uint64_t n, void* dst,
                             uint64_t dst_room, ReadDone done) {
  absl::Status st = CheckRange(slot, offset, n);
  if (st.ok() && dst_room < n)
    st = absl::OutOfRangeError(absl::StrCat("hbm read of ", n, " bytes into ", dst_room));
  if (st.ok())
    st = device_->Copy(hbm::CopyKind::kDeviceToHost, {{dst, DevicePtr(slot) + offset, n}},
                       NextStream());
  if (st.ok()) bytes_read_.fetch_add(n, std::memory_order_relaxed);
  done(std::move(st));
}

void HbmTier::CountOut(uint64_t n) { bytes_read_.fetch_add(n, std::memory_order_relaxed); }

IoCounters HbmTier::io_counters() const {
  IoCounters c;
  c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  return c;
}

uint64_t HbmTier::alloc_failures() const {
  return alloc_failures_.load(std::memory_order_relaxed);
}

absl::Status HbmTier::CheckRange(const Slot& slot, uint64_t offset, uint64_t n) const {
  const uint64_t cap = arena_->capacity();
  if (offset > slot.bytes || n > slot.bytes - offset || slot.bytes > cap ||
      slot.offset > cap - slot.bytes)
    return absl::OutOfRangeError(absl::StrCat("hbm slot access [", offset, ", +", n,
                                              ") outside slot of ", slot.bytes, " bytes at ",
                                              slot.offset));
  return absl::OkStatus();
}

}  // namespace kvtier::tiers
