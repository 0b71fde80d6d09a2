// HbmTier: the GPU tier. Slots are carved by a SlabArena out of one page pool
// in device memory (CudaDevice, or the EmulatedDevice without a GPU). Device
// memory is not load/store addressable from the daemon, so Address() is
// nullptr and Read/Write are device copies (D2H/H2D); the GPU data path uses
// DevicePtr() to copy device-to-device.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tiers/hbm/device.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

class SlabArena;

struct HbmTierConfig {
  uint64_t capacity_bytes = 0;
  // As the host tier: a slab serves one page size; pages must fit a slab.
  uint64_t slab_bytes = 16ull << 20;

  absl::Status Validate() const;
};

class HbmTier final : public Tier {
 public:
  static absl::StatusOr<std::unique_ptr<HbmTier>> Create(const HbmTierConfig& config,
                                                         std::shared_ptr<hbm::Device> device);
  ~HbmTier() override;

  TierKind kind() const override { return TierKind::kHbm; }
  std::string backing() const override;
  uint64_t capacity_bytes() const override;
  uint64_t used_bytes() const override;
  uint64_t max_slot_bytes() const override;

  absl::StatusOr<Slot> Allocate(uint64_t bytes) override;
  void Free(const Slot& slot) override;

  uint64_t alloc_failures() const override;
  uint8_t* Address(const Slot& slot) override { return nullptr; }

  // H2D / D2H copies that return when the bytes have arrived (a read's
  // `done` runs on the calling thread, after the copy).
  absl::Status Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) override;
  void ReadRangeAsync(const Slot& slot, uint64_t offset, uint64_t n, void* dst, uint64_t dst_room,
                      ReadDone done) override;
  IoCounters io_counters() const override;

  // Device address of a slot's first byte (valid while the slot is held).
  uint8_t* DevicePtr(const Slot& slot) const { return pool_ + slot.offset; }
  hbm::Device& device() const { return *device_; }
  // Bytes a device GET copied D2D into client buffers, which bypasses
  // Read/Write, for the tier's byte counters. (A device PUT's DMA into a
  // slot is counted by Reservation::MarkFilled.)
  void CountOut(uint64_t n);

 private:
  HbmTier(std::shared_ptr<hbm::Device> device, uint8_t* pool, std::unique_ptr<SlabArena> arena);
  absl::Status CheckRange(const Slot& slot, uint64_t offset, uint64_t n) const;
  int NextStream();

  std::shared_ptr<hbm::Device> device_;
  uint8_t* pool_;
  std::unique_ptr<SlabArena> arena_;
  std::atomic<uint64_t> bytes_written_{0}, bytes_read_{0}, alloc_failures_{0};
  std::atomic<uint32_t> stream_rr_{0};
};

}  // namespace kvtier::tiers
