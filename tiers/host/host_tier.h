// HostTier: RAM tier over a slab arena in POSIX shared memory. Hugepages are
// used when available (hugetlb-backed memfd, else THP advice on the shm
// mapping) and the tier falls back cleanly to 4 KiB pages.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

enum class HugepageMode { kAuto, kOn, kOff };

struct HostTierConfig {
  uint64_t capacity_bytes = 1ull << 30;
  // The arena is carved into slabs; each slab serves one page size, assigned
  // on first use and returned to the pool when it empties. Pages must fit a slab.
  uint64_t slab_bytes = 16ull << 20;
  std::string shm_name;  // empty: "/kvtier-host-<pid>"; unlinked at destruction
  HugepageMode hugepages = HugepageMode::kAuto;
  // Fault the whole arena in on a background thread at start, so no PUT
  // pays a first touch. Off: pages are faulted as slots are first used
  // (kvtier-scale-bench, so RSS follows the pages stored).
  bool prefault = true;

  absl::Status Validate() const;
};

absl::StatusOr<std::unique_ptr<Tier>> CreateHostTier(const HostTierConfig& config);

}  // namespace kvtier::tiers
