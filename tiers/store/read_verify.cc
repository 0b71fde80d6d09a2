// Integrity of bytes read back: every read from a persistent tier (ReadPage,
// ReadPages, ReadLayers, promotion) is checked against the checksum taken at
// PUT; a mismatch counts an error and drops the page, so a reader sees a miss,
// never wrong bytes. The pin that reads the page keeps it alive meanwhile.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tiers/store/internal/read_checks.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

absl::Status ReadChecks::KnownCorrupt(PageEntry *e) {
  if (!core_.tiers[e->tier]->tier->persistent()) return absl::OkStatus();
  IndexShard &shard = core_.index.ShardFor(e->ns, e->key);
  absl::MutexLock lock(&shard.mu);
  if (e->flags & PageEntry::kCorrupt)
    return absl::DataLossError(absl::StrCat("page ", e->key.ToHex(), " is corrupt"));
  return absl::OkStatus();
}

absl::Status ReadChecks::VerifySum(PageEntry *e, size_t t, uint64_t sum) {
  if (sum == e->checksum) return absl::OkStatus();
  return CorruptRead(e, t);
}

absl::Status ReadChecks::CorruptRead(PageEntry *e, size_t t) {
  TierState &ts = *core_.tiers[t];
  ts.checksum_errors.fetch_add(1, std::memory_order_relaxed);
  DropCorrupt(e);
  return absl::DataLossError(absl::StrCat("page ", e->key.ToHex(), " failed its checksum on ",
                                          std::string(TierName(ts.tier->kind())), "; dropped"));
}

absl::Status ReadChecks::VerifyRead(PageEntry *e, size_t t, const void *bytes) {
  // Bytes that left this process's memory (NVMe) are checked against the
  // checksum taken when they were written: a mismatch is a miss, never
  // wrong bytes.
  if (!core_.tiers[t]->tier->persistent()) return absl::OkStatus();
  return VerifySum(e, t, XXH3_64bits(bytes, e->slot.bytes));
}

void ReadChecks::DropCorrupt(PageEntry *e) {
  IndexShard &shard = core_.index.ShardFor(e->ns, e->key);
  bool counted;
  {
    absl::MutexLock lock(&shard.mu);
    e->flags |= PageEntry::kCorrupt;
    if (e->detached()) return;  // already gone; the last unpin frees it
    core_.DetachEntryLocked(shard, e);
    counted = e->flags & PageEntry::kCountedInParent;
    core_.tiers[e->tier]->dropped.fetch_add(1, std::memory_order_relaxed);
  }
  // The caller's pin keeps e alive; its Unpin frees it (detached, last pin).
  if (counted) core_.DetachFromParent(e->ns, e->parent);
}

}  // namespace kvtier::tiers
