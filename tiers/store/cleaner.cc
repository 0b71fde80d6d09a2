// Cleaning: the evictor writes the coldest dirty pages of each RAM tier to
// the persistent tier ahead of need, in batches with one sync each, and
// marks them clean. Making room in RAM is then dropping a page that already
// has a durable copy, which is all the request path (EvictMode::kCleanOnly)
// may do. A namespace whose quota blocked a PUT asks for its own pages to be
// cleaned. And the other direction: when the persistent tier needs room, the
// durable copies of pages that are also in RAM go first (write-back only).
#include <vector>

#include "tiers/store/internal/store_impl.h"

namespace kvtier::tiers {

PageEntry* TierManager::Impl::TakeDirty(size_t t, NamespaceId ns) {
  // Cleaning a page the admission filter would refuse writes what is never
  // read back: reused-only admission cleans only reused pages.
  const VictimFilter filter = config.persistent_admission == TierManagerConfig::Admission::kAll
                                  ? VictimFilter::kDirty
                                  : VictimFilter::kDirtyReused;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int s = PickVictimShard(t, ns, filter);
    if (s < 0) return nullptr;
    IndexShard& shard = index.shard(s);
    absl::MutexLock lock(&shard.mu);
    PageEntry* e = shard.FindVictimLocked(static_cast<uint8_t>(t), ns, ScanLimit(t), filter).entry;
    if (e == nullptr) continue;
    PinLocked(e);  // our pin: the page cannot leave or move while we copy it
    return e;
  }
  return nullptr;
}

size_t TierManager::Impl::CleanTier(size_t t, NamespaceId ns, uint64_t want_clean_bytes) {
  if (!HasBackupTier() || t >= backup_tier) return 0;
  const size_t last = backup_tier;
  // Whole-tier cleaning stops at the target; a namespace's request cleans
  // one batch of its own coldest pages.
  const uint64_t have =
      ns == 0 ? tiers[t]->clean_page_bytes.load(std::memory_order_relaxed) : 0;
  std::vector<PageMove> batch;
  uint64_t adding = 0;
  while (batch.size() < config.eviction_batch && have + adding < want_clean_bytes) {
    PageEntry* e = TakeDirty(t, ns);
    if (e == nullptr) break;
    batch.push_back(BeginMove(e, last, MoveKind::kClean, EvictMode::kMayWrite));
    adding += batch.back().old.bytes;
  }
  PersistMoves(batch);
  size_t cleaned = 0;
  for (PageMove& m : batch) cleaned += FinishMove(m) ? 1 : 0;
  return cleaned;
}

void TierManager::Impl::RequestClean(NamespaceId ns, size_t t) {
  if (!HasBackupTier() || t >= backup_tier || !config.start_evictor_thread) return;
  absl::MutexLock lock(&evictor_mu);
  clean_requests.insert({ns, t});
  evictor_kick = true;
  evictor_cv.Signal();
}

bool TierManager::Impl::CleanRequested() {
  absl::flat_hash_set<std::pair<NamespaceId, size_t>> work;
  {
    absl::MutexLock lock(&evictor_mu);
    work.swap(clean_requests);
  }
  bool progress = false;
  for (const auto& [ns, t] : work) {
    const NamespaceState* s = Ns(ns);
    if (s == nullptr) continue;
    if (CleanTier(t, ns, UINT64_MAX) > 0) progress = true;
  }
  return progress;
}

uint64_t TierManager::Impl::ReclaimBackups(uint64_t want_bytes) {
  if (config.write_through || !HasBackupTier()) return 0;  // there, every copy is a promise
  const size_t last = backup_tier;
  uint64_t freed = 0;
  for (size_t t = 0; t < last && freed < want_bytes; ++t) {
    for (uint32_t i = 0; i < index.num_shards() && freed < want_bytes; ++i) {
      IndexShard& shard = index.shard(i);
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
          meta = MetaOf(e);
          ns = e->ns;
          ClearBackupLocked(shard, e);
        }
        ReleaseSlot(last, ns, backup, meta);
        freed += backup.bytes;
      }
    }
  }
  return freed;
}

}  // namespace kvtier::tiers
