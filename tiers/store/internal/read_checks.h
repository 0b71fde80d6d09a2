// ReadChecks: the checks of bytes read back from a persistent tier (ReadPage,
// ReadPages, ReadLayers, promotion, publishing), each a miss plus a counter,
// never wrong bytes (read_verify.cc). Internal to tiers/store/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {

class ReadChecks {
 public:
  explicit ReadChecks(StoreCore &core) : core_(core) {}

  // DataLoss when e (pinned by the caller) was already found corrupt: no
  // second read is counted.
  absl::Status KnownCorrupt(PageEntry *e);
  // DataLoss when `sum` is not e's checksum: counts the error and drops
  // the page (CorruptRead).
  absl::Status VerifySum(PageEntry *e, size_t t, uint64_t sum);
  // As VerifySum over the xxh3-64 of `bytes`, when tier t is persistent.
  absl::Status VerifyRead(PageEntry *e, size_t t, const void *bytes);
  // Bytes of e read from tier t failed their check: counts it, drops the
  // page (a miss, never wrong bytes) and says so.
  absl::Status CorruptRead(PageEntry *e, size_t t);
  // Marks e corrupt and takes it out of the index; the caller's pin keeps it
  // alive, and its last unpin frees it.
  void DropCorrupt(PageEntry *e);

 private:
  StoreCore &core_;
};

}  // namespace kvtier::tiers
