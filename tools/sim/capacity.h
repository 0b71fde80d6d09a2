// Capacity arguments of kvtier-sim: page counts ("4k" = 4,000 pages, "4Ki" =
// 4,096) or byte sizes ("4GiB", "512MB": a trailing B means bytes), and how
// a byte size becomes pages under the daemon's slab arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/sim/accounting_tier.h"

namespace kvtier::sim {

struct CapacitySpec {
  std::string label;   // the text as given
  bool bytes = false;  // a byte size (needs --page_bytes), else pages
  uint64_t value = 0;
};

// InvalidArgument quotes the text and says what is wrong with it.
absl::StatusOr<CapacitySpec> ParseCapacity(absl::string_view text);
absl::StatusOr<std::vector<CapacitySpec>> ParseCapacityList(absl::string_view csv);
// A byte size: "16MiB", "1GB", "4096" (plain bytes).
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// Pages of a tier of `spec`: a page count as is; a byte size through
// BytesTier with `page_bytes` (0: error, naming `flag`), `slab_bytes` and
// the tier's slot alignment.
absl::StatusOr<TierSize> ResolveTier(const CapacitySpec& spec, uint64_t page_bytes,
                                     uint64_t slab_bytes, uint64_t slot_align);

// Records of a remote-tier cluster of `spec`: a page count as is; a byte
// size divided by `page_bytes` (0: error), whole records only.
absl::StatusOr<uint64_t> ResolveRecords(const CapacitySpec& spec, uint64_t page_bytes);

}  // namespace kvtier::sim
