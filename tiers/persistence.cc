// The store across restarts and across tiers upward: rebuilding the index
// from persistent tiers at start, and promoting pages read from a lower tier.
#include <algorithm>
#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "absl/strings/str_cat.h"
#include "tiers/tier_manager.h"
#include "tiers/tier_manager_impl.h"

namespace kvtier::tiers {
namespace {

struct Adopted {
  NamespaceId ns;
  PageMeta meta;
  Slot slot;
};

}  // namespace

absl::Status TierManager::RecoverPersistent() {
  Impl& m = *impl_;
  for (size_t t = 0; t < m.tiers.size(); ++t) {
    Tier& tier = *m.tiers[t]->tier;
    if (!tier.persistent()) continue;
    std::vector<Adopted> adopted;
    std::vector<std::string> names;  // meta.ns_name views point into the tier's record
    absl::Status st = tier.Recover([&](const PageMeta& meta, const Slot& slot) {
      auto ns = FindNamespace(std::string_view(meta.ns_name.data(), meta.ns_name.size()));
      if (!ns.ok()) return false;  // tenant removed: its pages go
      adopted.push_back(Adopted{*ns, meta, slot});
      adopted.back().meta.ns_name = {};
      return true;
    });
    if (!st.ok()) return st;
    // Re-insert oldest first with fresh stamps: each LRU list stays ordered.
    std::sort(adopted.begin(), adopted.end(),
              [](const Adopted& a, const Adopted& b) { return a.meta.stamp < b.meta.stamp; });
    for (const Adopted& a : adopted) {
      auto* e = new PageEntry{a.meta.key, a.meta.parent};
      e->slot = a.slot;
      e->checksum = a.meta.checksum;
      e->ns = a.ns;
      e->tier = static_cast<uint8_t>(t);
      IndexShard& shard = m.index.ShardFor(a.ns, a.meta.key);
      absl::MutexLock lock(&shard.mu);
      shard.InsertLocked(e, m.NextStamp());
      m.tiers[t]->pages.fetch_add(1, std::memory_order_relaxed);
      NamespaceState& ns = *m.Ns(a.ns);
      ns.pages.fetch_add(1, std::memory_order_relaxed);
      ns.tier_bytes[t].fetch_add(a.slot.bytes, std::memory_order_relaxed);
    }
    // Parent links last, when every recovered parent is present.
    for (const Adopted& a : adopted) {
      if (a.meta.parent.IsZero() || !m.AttachToParent(a.ns, a.meta.parent)) continue;
      IndexShard& shard = m.index.ShardFor(a.ns, a.meta.key);
      absl::MutexLock lock(&shard.mu);
      if (PageEntry* e = shard.FindLocked(a.ns, a.meta.key)) e->flags |= PageEntry::kCountedInParent;
    }
  }
  return absl::OkStatus();
}

bool TierManager::Promote(PagePin& pin) {
  Impl& m = *impl_;
  PageEntry* e = pin.entry_;
  if (e == nullptr || !m.config.promote_on_get) return false;
  IndexShard& shard = m.index.ShardFor(e->ns, e->key);
  size_t from;
  {
    absl::MutexLock lock(&shard.mu);
    // Only a page nobody else is reading may move (readers use its slot).
    if (e->tier <= m.promote_to || e->detached() || e->pins != 1) return false;
    from = e->tier;
  }
  const NamespaceId ns = e->ns;
  const Slot old = e->slot;  // stable: we hold the only pin
  const size_t to = m.promote_to;
  if (!m.ChargeQuota(ns, to, old.bytes)) return false;
  absl::StatusOr<Slot> dst = m.AllocateWithEviction(to, old.bytes);
  Tier& top = *m.tiers[to]->tier;
  Tier& lower = *m.tiers[from]->tier;
  if (dst.ok()) {
    uint8_t* p = top.Address(*dst);
    bool good = p != nullptr && lower.Read(old, 0, p, old.bytes).ok();
    if (good && lower.persistent() && XXH3_64bits(p, old.bytes) != e->checksum) {
      m.tiers[from]->checksum_errors.fetch_add(1, std::memory_order_relaxed);
      m.DropCorrupt(e);
      good = false;
    }
    if (!good) {
      top.Free(*dst);
      dst = absl::InternalError("read failed");
    }
  }
  if (!dst.ok()) {
    m.Uncharge(ns, to, old.bytes);
    return false;
  }
  bool keep = false;
  {
    absl::MutexLock lock(&shard.mu);
    if (e->detached() || e->pins != 1 || e->tier != from) {
      top.Free(*dst);
      m.Uncharge(ns, to, old.bytes);
      return false;
    }
    // Our pin moves with the page.
    m.tiers[from]->pinned_pages.fetch_sub(1, std::memory_order_relaxed);
    m.tiers[to]->pinned_pages.fetch_add(1, std::memory_order_relaxed);
    m.tiers[from]->pages.fetch_sub(1, std::memory_order_relaxed);
    m.tiers[to]->pages.fetch_add(1, std::memory_order_relaxed);
    e->slot = *dst;
    shard.MoveTierLocked(e, static_cast<uint8_t>(to), m.NextStamp());
    // Write-through keeps the durable copy: the page stays restartable and
    // its next demotion costs nothing.
    if (m.config.write_through && lower.persistent() && from == m.tiers.size() - 1) {
      e->backup = old;
      e->flags |= PageEntry::kHasBackup;
      keep = true;
    }
  }
  if (!keep) {
    PageMeta meta = m.MetaOf(e);
    if (lower.persistent()) lower.Unpersist(old, meta);
    lower.Free(old);
    m.Uncharge(ns, from, old.bytes);
  }
  m.tiers[to]->promotions.fetch_add(1, std::memory_order_relaxed);
  m.KickEvictorIfHigh(to);
  return true;
}

}  // namespace kvtier::tiers
