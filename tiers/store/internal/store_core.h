// StoreCore: what every part of the store shares — the tiers and their
// counters, the index and its entries, the namespaces — and the bookkeeping
// an entry changes under its shard lock (pins, its tier, its durable-copy
// flag, its parent's child count). It allocates, frees and moves nothing:
// slot_accounts.h charges and frees, page_move.h moves, evictor.h evicts.
// Internal to tiers/store/ (tests/arch/check_includes.py checks it).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tiers/store/internal/entry_pool.h"
#include "tiers/store/internal/page_index.h"
#include "tiers/store/internal/store_state.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

struct StoreCore {
  static constexpr NamespaceId kMaxNamespaces = 4096;

  StoreCore(const TierManagerConfig &c, std::vector<std::unique_ptr<Tier>> t);
  StoreCore(const StoreCore &) = delete;
  StoreCore &operator=(const StoreCore &) = delete;

  NamespaceState *Ns(NamespaceId id) const {
    return id == 0 || id >= kMaxNamespaces ? nullptr : ns_table[id].load(std::memory_order_acquire);
  }
  uint64_t NextStamp() { return clock.fetch_add(1, std::memory_order_relaxed); }
  // n consecutive stamps; returns the first (the oldest).
  uint64_t NextStamps(uint64_t n) { return clock.fetch_add(n, std::memory_order_relaxed); }
  bool IsLastTier(size_t t) const { return t + 1 >= tiers.size(); }
  bool IsBackupTier(size_t t) const { return t == backup_tier; }
  bool HasBackupTier() const { return backup_tier < tiers.size(); }
  // Where a GET promotes the pages it reads under `o` (ReadPage, ReadPages,
  // ReadLayers); nullopt: it does not.
  std::optional<size_t> PromoteTarget(const ReadOptions &o) const {
    if (!o.promote || (!o.promote_only && !config.promote_on_get)) return std::nullopt;
    return o.promote_to >= 0 ? static_cast<size_t>(o.promote_to) : promote_to;
  }
  // Counts bytes a caller moved into or out of tier t's slots through
  // Address() (TierState::direct_in/out).
  void CountIn(size_t t, uint64_t n) {
    tiers[t]->direct_in.fetch_add(n, std::memory_order_relaxed);
  }
  void CountOut(size_t t, uint64_t n) {
    tiers[t]->direct_out.fetch_add(n, std::memory_order_relaxed);
  }
  // The record of e in a persistent tier.
  PageMeta MetaOf(const PageEntry *e) const;

  // Pins under the shard lock; UnpinLocked returns true when the caller
  // must free the entry (it was detached and this was the last pin:
  // SlotAccounts::FreeEntry).
  void PinLocked(PageEntry *e);
  bool UnpinLocked(PageEntry *e);
  // Takes an entry out of the index and the page counts.
  void DetachEntryLocked(IndexShard &shard, PageEntry *e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // The one place an entry changes tier (demotion, promotion, dropping a
  // clean RAM copy): moves its counts, pin and LRU position to tier `to`
  // with slot `slot`. `keep_backup` false drops the durable-copy flag (the
  // backup became the page itself, or the caller frees it).
  void SwitchTierLocked(IndexShard &shard, PageEntry *e, size_t to, const Slot &slot,
                        bool keep_backup) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Marks e clean with durable copy `backup`, or clears it; keeps the tier's
  // clean counters equal to its flagged entries.
  void SetBackupLocked(IndexShard &shard, PageEntry *e, const Slot &backup)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void ClearBackupLocked(IndexShard &shard, PageEntry *e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Adjusts the parent's resident-children count (leaf-first eviction).
  // Returns true when the parent was found and counted the child.
  bool AttachToParent(NamespaceId ns, const PageKey &parent);
  void DetachFromParent(NamespaceId ns, const PageKey &parent);
  void TouchKey(NamespaceId ns, const PageKey &key);

  const TierManagerConfig config;
  std::vector<std::unique_ptr<TierState>> tiers;
  // Where promote_on_get moves pages: the highest host-addressable tier (the
  // host tier, also when an HBM tier sits above it), else the top tier.
  size_t promote_to = 0;
  // The tier holding RAM pages' durable copies (cleaning, write-through,
  // flushes, inclusive promotion): the first persistent tier (NVMe).
  // tiers.size() when there is none.
  size_t backup_tier = 0;
  // The shared cache beside the store (Create's), fixed before the evictor
  // starts.
  SharedCache *shared = nullptr;
  // The entries' memory; declared before the index, so it outlives what
  // the index points at.
  EntryPool entries;
  PageIndex index;
  Counter clock{1};

  mutable absl::Mutex ns_mu;
  absl::flat_hash_map<std::string, NamespaceId> ns_by_name ABSL_GUARDED_BY(ns_mu);
  std::vector<std::unique_ptr<NamespaceState>> ns_owned ABSL_GUARDED_BY(ns_mu);
  std::unique_ptr<std::atomic<NamespaceState *>[]> ns_table;
};

}  // namespace kvtier::tiers
