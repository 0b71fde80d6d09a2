// HostTier: the RAM tier. Slots come from a SlabArena laid over one
// ShmRegion; Address() gives direct pointers, Read/Write are bounds-checked
// copies that count bytes moved.
#include "tiers/host/host_tier.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "tiers/common/slab_arena.h"
#include "tiers/host/shm_region.h"

namespace kvtier::tiers {

absl::Status HostTierConfig::Validate() const {
  if (slab_bytes == 0 || slab_bytes % SlabArena::kSlotAlign != 0) {
    return absl::InvalidArgumentError(absl::StrCat("host tier slab_bytes ", slab_bytes,
                                                   " must be a non-zero multiple of ",
                                                   SlabArena::kSlotAlign));
  }
  if (capacity_bytes < slab_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("host tier capacity_bytes ", capacity_bytes,
                                                   " is below one slab (", slab_bytes, ")"));
  }
  if (slab_bytes > UINT32_MAX) {
    return absl::InvalidArgumentError("host tier slab_bytes must be below 4 GiB");
  }
  return absl::OkStatus();
}

namespace {

class HostTier final : public Tier {
 public:
  HostTier(std::unique_ptr<ShmRegion> region, std::unique_ptr<SlabArena> arena)
      : region_(std::move(region)), arena_(std::move(arena)) {}

  TierKind kind() const override { return TierKind::kHost; }
  std::string backing() const override { return region_->backing(); }
  uint64_t capacity_bytes() const override { return arena_->capacity(); }
  uint64_t used_bytes() const override { return arena_->used_bytes(); }
  uint64_t max_slot_bytes() const override { return arena_->slab_bytes(); }

  absl::StatusOr<Slot> Allocate(uint64_t bytes) override {
    auto slot = arena_->Allocate(bytes);
    if (!slot.ok()) alloc_failures_.fetch_add(1, std::memory_order_relaxed);
    return slot;
  }
  void Free(const Slot& slot) override { arena_->Free(slot); }

  uint8_t* Address(const Slot& slot) override { return region_->base() + slot.offset; }
  std::pair<uint8_t*, uint64_t> Region() override { return {region_->base(), region_->size()}; }

  absl::Status Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) override {
    RETURN_IF_ERROR(CheckRange(slot, offset, n));
    std::memcpy(region_->base() + slot.offset + offset, src, n);
    bytes_written_.fetch_add(n, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // RAM: every read completes here, on the calling thread.
  void ReadRangeAsync(const Slot& slot, uint64_t offset, uint64_t n, void* dst, uint64_t dst_room,
                      ReadDone done) override {
    absl::Status st = CheckRange(slot, offset, n);
    if (st.ok() && dst_room < n)
      st = absl::OutOfRangeError(absl::StrCat("read of ", n, " bytes into ", dst_room));
    if (st.ok()) {
      std::memcpy(dst, region_->base() + slot.offset + offset, n);
      bytes_read_.fetch_add(n, std::memory_order_relaxed);
    }
    done(std::move(st));
  }

  IoCounters io_counters() const override {
    IoCounters c;
    c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
    c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
    return c;
  }
  uint64_t alloc_failures() const override {
    return alloc_failures_.load(std::memory_order_relaxed);
  }

 private:
  absl::Status CheckRange(const Slot& slot, uint64_t offset, uint64_t n) const {
    // Written to avoid overflow: offset and n come from callers.
    const uint64_t cap = arena_->capacity();
    if (offset > slot.bytes || n > slot.bytes - offset || slot.bytes > cap ||
        slot.offset > cap - slot.bytes) {
      return absl::OutOfRangeError(absl::StrCat("host slot access [", offset, ", +", n,
                                                ") outside slot of ", slot.bytes, " bytes at ",
                                                slot.offset));
    }
    return absl::OkStatus();
  }

  std::unique_ptr<ShmRegion> region_;
  std::unique_ptr<SlabArena> arena_;
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> alloc_failures_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tier>> CreateHostTier(const HostTierConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(auto arena, SlabArena::Create(config.capacity_bytes, config.slab_bytes));
  ASSIGN_OR_RETURN(auto region,
                   ShmRegion::Create(config.shm_name, arena->capacity(), config.hugepages));
  if (config.prefault) region->PopulateInBackground();
  return std::unique_ptr<Tier>(new HostTier(std::move(region), std::move(arena)));
}

}  // namespace kvtier::tiers
