// Evictor: picks victims leaf-first and drops them from the last tier or
// demotes them one tier down (eviction.cc), cleans cold RAM pages ahead of
// need (cleaner.cc), publishes pages leaving the store to the shared cache
// (shared_publish.cc), and runs the thread that keeps each tier between its
// watermarks. It is the RoomMaker slot accounting calls when a charge or an
// allocation needs room. Internal to tiers/store/.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {

class ReadChecks;

class Evictor final : public RoomMaker {
 public:
  Evictor(StoreCore &core, SlotAccounts &slots, PageMover &mover, ReadChecks &checks)
      : core_(core), slots_(slots), mover_(mover), checks_(checks) {}
  ~Evictor() override { Stop(); }

  // RoomMaker. `ns` 0 means any namespace.
  size_t EvictOne(size_t t, NamespaceId ns, EvictMode mode) override;
  uint64_t ReclaimBackups(uint64_t want_bytes) override;
  void KickEvictor(size_t t) override;
  void KickEvictorIfHigh(size_t t) override;

  // Evicts from tier t until it holds at most `target` bytes; returns pages
  // that left it.
  size_t EvictTo(size_t t, uint64_t target);
  // Cleaning: writes the coldest dirty pages of RAM tier t to the
  // persistent tier in one batch (one sync) and marks them clean, until
  // tier t holds want_clean_bytes of clean pages (or one batch of ns's).
  size_t CleanTier(size_t t, NamespaceId ns, uint64_t want_clean_bytes);
  // A namespace whose quota blocked a PUT asks for its own pages of tier t
  // to be cleaned (by the evictor thread).
  void RequestClean(NamespaceId ns, size_t t);
  // The evictor thread (config.start_evictor_thread).
  void Start();
  void Stop();

 private:
  // What TakeVictim chose.
  struct Taken {
    PageEntry *entry = nullptr;  // pinned once by us, for demotion; else nullptr
    bool dropped = false;        // the victim left the store at once
    bool publish = false;        // entry leaves the store once published (shared cache)
    bool claimed = false;        // entry's bytes hold a reserve claim in its tier
  };
  class TierReserves;  // ReserveView over ReserveHeadroom (eviction.cc)

  // The next victim of tier t: dropped at once when it leaves the store,
  // else returned for demotion. `ns` 0 (a tier-wide pick: everyone's
  // pressure) respects every namespace's reserve; a namespace's own pick
  // (its quota, an operator's eviction of it) may go below its reserve.
  Taken TakeVictim(size_t t, NamespaceId ns, EvictMode mode);
  // Which pages of tier t `mode` may evict; nullopt: none (kCleanOnly never
  // evicts from a persistent tier: that deletes records).
  std::optional<VictimFilter> FilterFor(size_t t, EvictMode mode) const;
  // Whether a page leaving tier t may be written to tier t+1 (admission).
  bool Admit(const PageEntry *e, size_t t) const;
  // A demotion of a victim TakeVictim picked: BeginMove, noting its claim.
  PageMove BeginEviction(const Taken &v, size_t t, EvictMode mode);
  // FinishMove, then the pick's reserve claim (its bytes have left the
  // tier, or it stayed).
  bool FinishEviction(PageMove &m);
  // Up to max_pages, stopping once tier t would be at or below target bytes.
  size_t DemoteBatch(size_t t, size_t max_pages, uint64_t target, EvictMode mode);
  // The shard holding tier t's best victim (-1: none), leaves first, then
  // oldest. Tier-wide (ns 0): shards are scanned oldest page first until
  // none left can hold an older leaf; a namespace's own pick scans all.
  int PickVictimShard(size_t t, NamespaceId ns, VictimFilter filter,
                      const ReserveView *reserves = nullptr);
  // Scans every shard: the best victim of all, leaves first, then oldest.
  int BestVictimShard(size_t t, NamespaceId ns, VictimFilter filter, const ReserveView *reserves);
  uint32_t ScanLimit(size_t t) const;

  // The shared cache (shared_publish.cc): whether a page leaving the store
  // from tier t (the last) in `mode` is published first; publishing e
  // (pinned once by the caller, no lock held): read, checked, handed over
  // sealed (a page that fails its checksum is not published); and a victim
  // TakeVictim pinned for publishing: published, then dropped unless
  // someone else pinned it meanwhile (it stays). True when dropped.
  bool PublishesOnEviction(const PageEntry *e, size_t t, EvictMode mode) const;
  void PublishLeaving(PageEntry *e, size_t t);
  bool PublishAndDrop(const Taken &v, size_t t);

  // Cleaning (cleaner.cc).
  PageEntry *TakeDirty(size_t t, NamespaceId ns);
  bool CleanRequested();  // runs the namespaces' requests; true on progress

  void EvictorLoop();
  bool EvictorRound();

  StoreCore &core_;
  SlotAccounts &slots_;
  PageMover &mover_;
  ReadChecks &checks_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool kick_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Namespaces whose quota pressure asked for cleaning, per tier.
  absl::flat_hash_set<std::pair<NamespaceId, size_t>> clean_requests_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kvtier::tiers
