// The store across restarts: rebuilding the index from persistent tiers at
// start. (GET's read operations, ReadPage and ReadPages, are in
// page_reads.cc.)
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

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
  for (size_t t = 0; t < m.core.tiers.size(); ++t) {
    Tier& tier = *m.core.tiers[t]->tier;
    if (!tier.persistent()) continue;
    std::vector<Adopted> adopted;
    std::vector<std::string> names;  // meta.ns_name views point into the tier's record
    absl::Status st = tier.durable()->Recover([&](const PageMeta& meta, const Slot& slot) {
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
      PageEntry* e = m.core.entries.New(a.meta.key, a.meta.parent);
      e->slot = a.slot;
      e->checksum = a.meta.checksum;
      e->ns = a.ns;
      e->tier = static_cast<uint8_t>(t);
      IndexShard& shard = m.core.index.ShardFor(a.ns, a.meta.key);
      absl::MutexLock lock(&shard.mu);
      shard.InsertLocked(e, m.core.NextStamp());
      m.core.tiers[t]->pages.fetch_add(1, std::memory_order_relaxed);
      NamespaceState& ns = *m.core.Ns(a.ns);
      ns.pages.fetch_add(1, std::memory_order_relaxed);
      ns.tier_bytes[t].fetch_add(a.slot.bytes, std::memory_order_relaxed);
    }
    // Parent links last, when every recovered parent is present.
    for (const Adopted& a : adopted) {
      if (a.meta.parent.IsZero() || !m.core.AttachToParent(a.ns, a.meta.parent)) continue;
      IndexShard& shard = m.core.index.ShardFor(a.ns, a.meta.key);
      absl::MutexLock lock(&shard.mu);
      if (PageEntry* e = shard.FindLocked(a.ns, a.meta.key)) e->flags |= PageEntry::kCountedInParent;
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::tiers
