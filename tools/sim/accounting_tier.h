// AccountingTier: a tiers::Tier that hands out slots and counts capacity but
// stores no bytes, so kvtier-sim can run the real TierManager policy over a
// trace of any size in a few megabytes. Sizes are modelled on the daemon's
// slab arenas (TierSize), and every page is kSimPageBytes inside the sim.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tiers/tier.h"

namespace kvtier::sim {

// The page size the sim hands TierManager. Small, so the checksums that
// demotion and promotion take (over a shared all-zero scratch page) cost
// next to nothing; large enough that byte capacities scaled to it keep the
// watermark thresholds within 1/4096 page of the daemon's.
inline constexpr uint64_t kSimPageBytes = 4096;

// How many pages a tier holds, and the capacity its watermarks are
// fractions of (in pages; larger than `slots` when a slab wastes a tail).
struct TierSize {
  uint64_t slots = 0;
  double capacity_pages = 0;
};

// Exactly `pages` pages.
TierSize PagesTier(uint64_t pages);
// The daemon's arithmetic for a tier of `bytes` carved into `slab_bytes`
// slabs of slots of `page_bytes` rounded up to `slot_align` (64 for the host
// arena, 4096 for NVMe). InvalidArgument names the value that cannot work.
absl::StatusOr<TierSize> BytesTier(uint64_t bytes, uint64_t page_bytes, uint64_t slab_bytes,
                                   uint64_t slot_align);

// Host kind: Address() returns the shared scratch page (TierManager copies
// and promotes only through addressable upper tiers). NVMe kind: not
// addressable, persistent, with a durable index that records nothing (the
// sim has no restarts); DurableIndex is the first base so that it is
// constructed before Tier is handed a pointer to it. Not thread-safe beyond
// what a single-threaded replay needs.
class AccountingTier final : public tiers::DurableIndex, public tiers::Tier {
 public:
  static absl::StatusOr<std::unique_ptr<AccountingTier>> Create(tiers::TierKind kind,
                                                                const TierSize& size);

  tiers::TierKind kind() const override { return kind_; }
  std::string backing() const override;
  uint64_t capacity_bytes() const override { return capacity_bytes_; }
  uint64_t used_bytes() const override { return used_ * kSimPageBytes; }
  uint64_t max_slot_bytes() const override { return kSimPageBytes; }

  absl::StatusOr<tiers::Slot> Allocate(uint64_t bytes) override;
  void Free(const tiers::Slot& slot) override;

  uint64_t alloc_failures() const override { return alloc_failures_; }
  uint8_t* Address(const tiers::Slot& slot) override;
  // Host kind: the scratch page, so TierManager sees a host-addressable tier
  // (it promotes into the highest such tier).
  std::pair<uint8_t*, uint64_t> Region() override;

  absl::Status Write(const tiers::Slot& slot, uint64_t offset, const void* src,
                     uint64_t n) override;
  void ReadRangeAsync(const tiers::Slot& slot, uint64_t offset, uint64_t n, void* dst,
                      uint64_t dst_room, ReadDone done) override;
  tiers::IoCounters io_counters() const override { return counters_; }

  // DurableIndex (NVMe kind): every record is "written", none is kept.
  absl::Status PersistBatch(const std::vector<tiers::Slot>& slots,
                            const std::vector<tiers::PageMeta>& metas,
                            std::vector<bool>* written = nullptr) override {
    if (written != nullptr) written->assign(slots.size(), true);
    return absl::OkStatus();
  }
  void Unpersist(const tiers::Slot&, const tiers::PageMeta&) override {}
  absl::Status Recover(const AdoptFn&) override { return absl::OkStatus(); }
  tiers::ChunkSums ReadChunkSums(const tiers::Slot&, const tiers::PageMeta&) override {
    return {};
  }
  tiers::DurableCounters durable_counters() const override { return {}; }

  uint64_t slots() const { return slots_; }
  uint64_t used_slots() const { return used_; }
  uint64_t bad_frees() const { return bad_frees_; }

 private:
  AccountingTier(tiers::TierKind kind, const TierSize& size);
  absl::Status CheckRange(const tiers::Slot& slot, uint64_t offset, uint64_t n) const;

  const tiers::TierKind kind_;
  const uint64_t slots_;
  const uint64_t capacity_bytes_;
  uint64_t used_ = 0;
  uint64_t next_fresh_ = 0;      // slots never handed out start here
  std::vector<uint64_t> free_;   // freed slot indices, reused first
  std::vector<bool> allocated_;  // catches double frees
  uint64_t bad_frees_ = 0;
  tiers::IoCounters counters_;
  uint64_t alloc_failures_ = 0;
};

}  // namespace kvtier::sim
