// NvmeTier: the persistent tier. Pages live in fixed slots of a preallocated
// O_DIRECT data file (a slab arena of 4 KiB-aligned slots over the file's
// byte space); their index lives in RocksDB (nvme_index.h) so that a
// restarted daemon serves every page whose bytes and record reached the disk.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tiers/nvme/device.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

struct NvmeTierConfig {
  std::string dir;  // holds kvtier-nvme.data and index/ (RocksDB)
  uint64_t capacity_bytes = 4ull << 30;
  uint64_t slab_bytes = 16ull << 20;  // the largest page the tier holds
  uint32_t io_threads = 1;
  uint32_t queue_depth = 64;
  // Shares of queue_depth for prefetch reads and (while reads run) write-back:
  // nvme::FileDeviceConfig.
  double prefetch_share = 0.25;
  double writeback_share = 0.125;
  // When the data file's geometry (capacity, slab size) differs from the one
  // its index was written for, every cached page is lost. Without this the
  // tier refuses to open (nothing is touched); with it, the records are
  // dropped and the file reused (kvtierd --reformat_nvme). No effect when the
  // geometry is unchanged.
  bool reformat = false;

  absl::Status Validate() const;
  std::string DataPath() const { return dir + "/kvtier-nvme.data"; }
  std::string IndexPath() const { return dir + "/index"; }
};

// Opens or creates the data file and the index. `device` replaces the file
// device (tests: a memory or fault-injecting device of capacity_bytes);
// the index still lives under config.dir. Errors name the path at fault.
// A geometry change without config.reformat is FailedPrecondition marked
// NeedsOperator (kvtier/errors.h), naming both geometries and the pages at
// stake; the data file and index are left as they were.
absl::StatusOr<std::unique_ptr<Tier>> CreateNvmeTier(
    const NvmeTierConfig& config, std::unique_ptr<nvme::Device> device = nullptr);

}  // namespace kvtier::tiers
