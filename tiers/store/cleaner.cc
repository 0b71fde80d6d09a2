// Cleaning: the evictor writes the coldest dirty pages of each RAM tier to
// the persistent tier ahead of need, in batches with one sync each, and
// marks them clean. Making room in RAM is then dropping a page that already
// has a durable copy, which is all the request path (EvictMode::kCleanOnly)
// may do. A namespace whose quota blocked a PUT asks for its own pages to be
// cleaned. And the other direction: when the persistent tier needs room, the
// durable copies of pages that are also in RAM go first (write-back only).
#include <vector>

#include "tiers/store/internal/evictor.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {

PageEntry *Evictor::TakeDirty(size_t t, NamespaceId ns) {
  // Cleaning a page the admission filter would refuse writes what is never
  // read back: reused-only admission cleans only reused pages.
  const VictimFilter filter =
      core_.config.persistent_admission == TierManagerConfig::Admission::kAll
          ? VictimFilter::kDirty
          : VictimFilter::kDirtyReused;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int s = PickVictimShard(t, ns, filter);
    if (s < 0) return nullptr;
    IndexShard &shard = core_.index.shard(s);
    absl::MutexLock lock(&shard.mu);
    PageEntry* e = shard.FindVictimLocked(static_cast<uint8_t>(t), ns, ScanLimit(t), filter).entry;
    if (e == nullptr) continue;
    core_.PinLocked(e);  // our pin: the page cannot leave or move while we copy it
    return e;
  }
  return nullptr;
}

size_t Evictor::CleanTier(size_t t, NamespaceId ns, uint64_t want_clean_bytes) {
  if (!core_.HasBackupTier() || t >= core_.backup_tier) return 0;
  const size_t last = core_.backup_tier;
  // Whole-tier cleaning stops at the target; a namespace's request cleans
  // one batch of its own coldest pages.
  const uint64_t have =
      ns == 0 ? core_.tiers[t]->clean_page_bytes.load(std::memory_order_relaxed) : 0;
  std::vector<PageMove> batch;
  uint64_t adding = 0;
  while (batch.size() < core_.config.eviction_batch && have + adding < want_clean_bytes) {
    PageEntry* e = TakeDirty(t, ns);
    if (e == nullptr) break;
    batch.push_back(mover_.BeginMove(e, last, MoveKind::kClean, EvictMode::kMayWrite));
    adding += batch.back().old.bytes;
  }
  mover_.PersistMoves(batch);
  size_t cleaned = 0;
  for (PageMove &m : batch) cleaned += mover_.FinishMove(m) ? 1 : 0;
  return cleaned;
}

void Evictor::RequestClean(NamespaceId ns, size_t t) {
  if (!core_.HasBackupTier() || t >= core_.backup_tier || !core_.config.start_evictor_thread)
    return;
  absl::MutexLock lock(&mu_);
  clean_requests_.insert({ns, t});
  kick_ = true;
  cv_.Signal();
}

bool Evictor::CleanRequested() {
  absl::flat_hash_set<std::pair<NamespaceId, size_t>> work;
  {
    absl::MutexLock lock(&mu_);
    work.swap(clean_requests_);
  }
  bool progress = false;
  for (const auto& [ns, t] : work) {
    const NamespaceState *s = core_.Ns(ns);
    if (s == nullptr) continue;
    if (CleanTier(t, ns, UINT64_MAX) > 0) progress = true;
  }
  return progress;
}

uint64_t Evictor::ReclaimBackups(uint64_t want_bytes) {
  if (core_.config.write_through || !core_.HasBackupTier())
    return 0;  // there, every copy is a promise
  const size_t last = core_.backup_tier;
  uint64_t freed = 0;
  for (size_t t = 0; t < last && freed < want_bytes; ++t) {
    for (uint32_t i = 0; i < core_.index.num_shards() && freed < want_bytes; ++i) {
      IndexShard &shard = core_.index.shard(i);
      while (freed < want_bytes) {
        Slot backup;
        PageMeta meta;
        NamespaceId ns;
        {
          absl::MutexLock lock(&shard.mu);
          // The most recently used RAM pages are the last to need their copy.
          PageEntry* e = shard.FindRecentCleanLocked(static_cast<uint8_t>(t), 64);
          if (e == nullptr) break;
          backup = e->backup;
          meta = core_.MetaOf(e);
          ns = e->ns;
          core_.ClearBackupLocked(shard, e);
        }
        slots_.ReleaseSlot(last, ns, backup, meta);
        freed += backup.bytes;
      }
    }
  }
  return freed;
}

}  // namespace kvtier::tiers
