// The daemon's GPU data path: picking the device backend and the HBM tier at
// start, mapping client GPU buffers (CUDA IPC, or the emulated device's
// memory), and the copies of GET/PUT through such a buffer. GET copies each
// page straight into the client's memory — HBM→client D2D, host→client H2D
// from the pinned host arena, NVMe→host→HBM tier→client (deep reads) — and
// PUT the other way; adjacent pages go as one copy, each batch on one
// device stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/client_buffer.h"
#include "prefetch/prefetcher.h"
#include "tiers/hbm/device.h"
#include "tiers/hbm/hbm_tier.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::daemon {

// Device flags of kvtierd (--hbm_device, --hbm_bytes, --hbm_device_ordinal).
struct DeviceOptions {
  tiers::hbm::DeviceMode mode = tiers::hbm::DeviceMode::kAuto;
  uint64_t hbm_bytes = 0;  // 0: no HBM tier
  int ordinal = 0;
};

// Whether `name` is a shm object of this daemon's emulated device (its HBM
// pool), which no client may register.
bool IsOwnDeviceObject(absl::string_view name);

// GET of pins[begin, end) into the device buffer `buf` at offsets[i]. HBM
// pages go D2D; the others are read with ReadPagesForGet (every NVMe read in
// flight at once; `pf` is held back meanwhile) and copied as each is handed
// over, in batches: an NVMe page promoted into host memory (promote_on_get)
// moves on up into the HBM tier when it has clean room and goes D2D from
// there, else H2D from host memory or from a verified bounce copy. A page
// that fails its checksum on NVMe becomes a miss (tiers[i] = 0, pin reset)
// and none of its bytes reach `buf`. Returns when every copy has
// completed; the first error otherwise.
absl::Status DeviceGet(tiers::TierManager& store, tiers::HbmTier* hbm, prefetch::Prefetcher* pf,
                       const ClientBuffer& buf,
                       absl::Span<tiers::PagePin> pins, absl::Span<const uint64_t> offsets,
                       std::string& tiers, size_t begin, size_t end);

// PUT: fills reservations rs[begin, end) from `buf` at offsets[key_index[r]]
// (D2D into HBM slots, D2H into host slots, staged through host memory where
// the page needs a checksum). Unfilled reservations are left for the caller
// to drop.
absl::Status DevicePut(tiers::HbmTier* hbm, const ClientBuffer& buf,
                       absl::Span<tiers::Reservation> rs, absl::Span<const size_t> key_index,
                       absl::Span<const uint64_t> offsets, size_t begin, size_t end);

}  // namespace kvtier::daemon
