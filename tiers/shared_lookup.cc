// Cluster-wide lookup: the keys of a chain past its local hits are looked
// for in the shared remote tier (pages another node stored), with one
// existence check per node touched, and the leading ones found are adopted
// into the index as remote-tier entries, so LOOKUP reports them and GET and
// prefetch read them like any lower-tier page. Their checksum is unknown
// here (0): the remote tier verifies its self-describing record instead.
#include <optional>
#include <vector>

#include "tiers/shared_tier.h"
#include "tiers/tier_manager.h"
#include "tiers/tier_manager_impl.h"

namespace kvtier::tiers {

uint32_t TierManager::AdoptShared(NamespaceId ns, absl::Span<const PageKey> keys,
                                  const PageKey& parent, uint64_t bytes) {
  Impl& m = *impl_;
  NamespaceState* state = m.Ns(ns);
  if (state == nullptr || keys.empty() || bytes == 0 || m.shared == nullptr) return 0;
  const size_t t = m.shared_tier;
  Tier& tier = *m.tiers[t]->tier;
  std::vector<std::optional<Slot>> found = m.shared->AdoptShared(state->name, keys, bytes);
  size_t n = 0;
  while (n < found.size() && found[n].has_value()) ++n;
  for (size_t i = n; i < found.size(); ++i)
    if (found[i]) tier.Free(*found[i]);  // past the chain's first gap: useless
  uint32_t adopted = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!m.AdoptEntry(ns, t, keys[i], i == 0 ? parent : keys[i - 1],
                      *found[i])) {
      for (size_t j = i + 1; j < n; ++j) tier.Free(*found[j]);
      break;
    }
    ++adopted;
  }
  return adopted;
}

bool TierManager::Impl::AdoptEntry(NamespaceId ns, size_t t, const PageKey& key,
                                   const PageKey& parent, const Slot& slot) {
  NamespaceState& state = *Ns(ns);
  if (!TryCharge(state, t, slot.bytes)) {  // a remote quota, when one is set
    tiers[t]->tier->Free(slot);
    return false;
  }
  IndexShard& shard = index.ShardFor(ns, key);
  PageEntry* e = entries.New(key, parent);
  e->slot = slot;
  e->checksum = 0;  // the remote record carries and checks its own
  e->ns = ns;
  e->tier = static_cast<uint8_t>(t);
  {
    absl::MutexLock lock(&shard.mu);
    // A local copy (or a PUT of it in flight) came meanwhile: it wins.
    if (shard.FindLocked(ns, key) != nullptr || shard.InFlightLocked(ns, key) != nullptr) {
      entries.Delete(e);
      e = nullptr;
    } else {
      shard.InsertLocked(e, NextStamp());
      tiers[t]->pages.fetch_add(1, std::memory_order_relaxed);
      state.pages.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (e == nullptr) {
    FreeSlot(t, ns, slot);
    return true;  // present: the chain goes on
  }
  if (!parent.IsZero() && AttachToParent(ns, parent)) {
    bool counted = false;
    {
      absl::MutexLock lock(&shard.mu);
      if (PageEntry* f = shard.FindLocked(ns, key); f == e) {
        e->flags |= PageEntry::kCountedInParent;
        counted = true;
      }
    }
    if (!counted) DetachFromParent(ns, parent);  // it left meanwhile
  }
  return true;
}

}  // namespace kvtier::tiers
