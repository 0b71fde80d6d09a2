// StoreCore (internal/store_core.h): the tiers' watermarks and policies set
// up from the config, and the bookkeeping an entry changes under its shard
// lock: pins, its tier, its durable-copy flag, its parent's child count.
#include "tiers/store/internal/store_core.h"

#include <memory>
#include <utility>
#include <vector>

namespace kvtier::tiers {

StoreCore::StoreCore(const TierManagerConfig &c, std::vector<std::unique_ptr<Tier>> t)
    : config(c),
      index(c.index_shards),
      ns_table(new std::atomic<NamespaceState *>[kMaxNamespaces]) {
  for (NamespaceId i = 0; i < kMaxNamespaces; ++i) ns_table[i].store(nullptr);
  for (auto &tier : t) {
    auto s = std::make_unique<TierState>();
    const double cap = static_cast<double>(tier->capacity_bytes());
    s->high_bytes = static_cast<uint64_t>(cap * c.high_watermark);
    s->low_bytes = static_cast<uint64_t>(cap * c.low_watermark);
    s->clean_bytes = static_cast<uint64_t>(cap * c.clean_fraction);
    s->clean_start_bytes = static_cast<uint64_t>(cap * (c.low_watermark - c.clean_fraction));
    s->tier = std::move(tier);
    tiers.push_back(std::move(s));
  }
  for (size_t i = 0; i < tiers.size(); ++i) {
    auto p = c.eviction.find(tiers[i]->tier->kind());
    index.SetPolicy(static_cast<uint8_t>(i),
                    p == c.eviction.end() ? EvictionPolicy::kLru : p->second, tiers[i]->low_bytes);
  }
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i]->tier->Region().first != nullptr) {
      promote_to = i;
      break;
    }
  }
  backup_tier = tiers.size();
  for (size_t i = 0; i < tiers.size(); ++i) {
    const Tier &tier = *tiers[i]->tier;
    if (tier.persistent()) {
      backup_tier = i;
      break;
    }
  }
}

void StoreCore::PinLocked(PageEntry *e) {
  if (e->pins++ == 0) tiers[e->tier]->pinned_pages.fetch_add(1, std::memory_order_relaxed);
}

bool StoreCore::UnpinLocked(PageEntry *e) {
  if (--e->pins > 0) return false;
  tiers[e->tier]->pinned_pages.fetch_sub(1, std::memory_order_relaxed);
  return e->detached();
}

void StoreCore::DetachEntryLocked(IndexShard &shard, PageEntry *e) {
  if (e->clean()) {  // the counters cover indexed entries only
    tiers[e->tier]->clean_pages.fetch_sub(1, std::memory_order_relaxed);
    tiers[e->tier]->clean_page_bytes.fetch_sub(e->slot.bytes, std::memory_order_relaxed);
  }
  shard.DetachLocked(e);
  tiers[e->tier]->pages.fetch_sub(1, std::memory_order_relaxed);
  if (NamespaceState *ns = Ns(e->ns)) ns->pages.fetch_sub(1, std::memory_order_relaxed);
}

bool StoreCore::AttachToParent(NamespaceId ns, const PageKey &parent) {
  IndexShard &shard = index.ShardFor(ns, parent);
  absl::MutexLock lock(&shard.mu);
  PageEntry *p = shard.FindLocked(ns, parent);
  if (p == nullptr) return false;
  ++p->resident_children;
  // prefix: a page with a child is no longer a chain's end (relinked with
  // its resident child counted).
  if (shard.ChainEndLocked(p)) shard.TouchLocked(p, NextStamp());
  return true;
}

void StoreCore::DetachFromParent(NamespaceId ns, const PageKey &parent) {
  IndexShard &shard = index.ShardFor(ns, parent);
  absl::MutexLock lock(&shard.mu);
  // The parent may have been replaced since the child counted itself; the
  // count is an eviction hint, so clamping at zero is enough.
  PageEntry *p = shard.FindLocked(ns, parent);
  if (p != nullptr && p->resident_children > 0) --p->resident_children;
}

void StoreCore::TouchKey(NamespaceId ns, const PageKey &key) {
  IndexShard &shard = index.ShardFor(ns, key);
  absl::MutexLock lock(&shard.mu);
  if (PageEntry *e = shard.FindLocked(ns, key)) shard.TouchLocked(e, NextStamp());
}

PageMeta StoreCore::MetaOf(const PageEntry *e) const {
  PageMeta m;
  if (const NamespaceState *ns = Ns(e->ns)) m.ns_name = ns->name;
  m.key = e->key;
  m.parent = e->parent;
  m.checksum = e->checksum;
  m.stamp = e->stamp;
  return m;
}

void StoreCore::SetBackupLocked(IndexShard &shard, PageEntry *e, const Slot &backup) {
  e->backup = backup;
  if (e->clean()) return;
  e->flags |= PageEntry::kHasBackup;
  if (e->detached()) return;
  tiers[e->tier]->clean_pages.fetch_add(1, std::memory_order_relaxed);
  tiers[e->tier]->clean_page_bytes.fetch_add(e->slot.bytes, std::memory_order_relaxed);
}

void StoreCore::ClearBackupLocked(IndexShard &shard, PageEntry *e) {
  if (!e->clean()) return;
  e->flags &= ~PageEntry::kHasBackup;
  if (e->detached()) return;
  tiers[e->tier]->clean_pages.fetch_sub(1, std::memory_order_relaxed);
  tiers[e->tier]->clean_page_bytes.fetch_sub(e->slot.bytes, std::memory_order_relaxed);
}

void StoreCore::SwitchTierLocked(IndexShard &shard, PageEntry *e, size_t to, const Slot &slot,
                                 bool keep_backup) {
  const bool was_clean = e->clean();
  ClearBackupLocked(shard, e);
  TierState &a = *tiers[e->tier];
  TierState &b = *tiers[to];
  a.pages.fetch_sub(1, std::memory_order_relaxed);
  b.pages.fetch_add(1, std::memory_order_relaxed);
  if (e->pins > 0) {  // a mover's or reader's pin moves with the page
    a.pinned_pages.fetch_sub(1, std::memory_order_relaxed);
    b.pinned_pages.fetch_add(1, std::memory_order_relaxed);
  }
  // A fresh stamp in the new tier: pages arrive there in the order they move.
  shard.MoveTierLocked(e, static_cast<uint8_t>(to), slot, NextStamp());
  if (was_clean && keep_backup && !IsBackupTier(to)) SetBackupLocked(shard, e, e->backup);
}

}  // namespace kvtier::tiers
