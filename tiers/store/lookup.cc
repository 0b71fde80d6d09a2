// TierManager::Lookup: LOOKUP's probe of a prefix chain. A chain's keys are
// spread over the index shards, and a shard lock per key, twice (probe, then
// the tail-first recency touch), was most of a LOOKUP's cost (issue 14); so
// the keys are grouped by shard, and each shard is locked once to probe and
// once to touch, however long the chain. Also the store's other probes:
// where a page lives (Locate, TierIndex) and lease holds (HoldForLease), which
// pin without reading.
#include <algorithm>
#include <optional>
#include <vector>

#include "tiers/store/internal/page_index.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {
namespace {

// A chain's keys grouped by shard: groups in the order of their first key,
// each group's keys in chain order. One per thread, reused: a LOOKUP
// allocates nothing once its thread has seen its longest chain.
struct ChainShards {
  struct Group {
    uint32_t shard;
    uint32_t begin, end;  // into `order`
  };
  std::vector<Group> groups;
  std::vector<uint32_t> order;     // key indices, group after group
  std::vector<uint32_t> group_of_key;  // by key
  std::vector<uint32_t> group_of;      // by shard: 1 + its group, 0 none; all 0 between calls
  std::vector<uint8_t> tier_of;    // by key: the tier a probe found it in

  void Build(const PageIndex& index, NamespaceId ns, absl::Span<const PageKey> keys);
  // End of g's keys below `limit` (g's keys are in chain order).
  uint32_t EndBelow(const Group& g, uint32_t limit) const {
    uint32_t j = g.begin;
    while (j < g.end && order[j] < limit) ++j;
    return j;
  }
};

void ChainShards::Build(const PageIndex& index, NamespaceId ns, absl::Span<const PageKey> keys) {
  const auto n = static_cast<uint32_t>(keys.size());
  if (group_of.size() < index.num_shards()) group_of.resize(index.num_shards(), 0);
  group_of_key.resize(n);
  tier_of.resize(n);
  order.resize(n);
  groups.clear();
  for (uint32_t i = 0; i < n; ++i) {  // count each group's keys in its `end`
    const uint32_t s = index.ShardIndex(ns, keys[i]);
    if (group_of[s] == 0) {
      groups.push_back(Group{s, 0, 0});
      group_of[s] = static_cast<uint32_t>(groups.size());
    }
    group_of_key[i] = group_of[s] - 1;
    ++groups[group_of_key[i]].end;
  }
  uint32_t at = 0;
  for (Group& g : groups) {
    g.begin = at;
    at += g.end;
    g.end = g.begin;  // a fill cursor until every key is placed
  }
  for (uint32_t i = 0; i < n; ++i) order[groups[group_of_key[i]].end++] = i;
  for (const Group& g : groups) group_of[g.shard] = 0;
}

thread_local ChainShards chain_shards;

// The probe, one lock per shard: the chain's leading hits, and in
// c.tier_of the tier of each. Keys past a miss found so far are not
// probed, so a chain that misses at its first key locks one shard.
uint32_t ProbeChain(PageIndex& index, NamespaceId ns, absl::Span<const PageKey> keys,
                    ChainShards& c) {
  // A probe is dependent cache misses at millions of pages (table control
  // bytes, slot, entry): the table lines of the next few keys are loaded
  // ahead, so their misses overlap.
  constexpr uint32_t kAhead = 8;
  auto hits = static_cast<uint32_t>(keys.size());
  for (const ChainShards::Group& g : c.groups) {
    if (c.order[g.begin] >= hits) break;  // and every later group's first key
    IndexShard& shard = index.shard(g.shard);
    absl::MutexLock lock(&shard.mu);
    const uint32_t end = c.EndBelow(g, hits);
    // Not the first key: its probe comes next, and would wait all the same.
    for (uint32_t j = g.begin + 1; j < std::min(end, g.begin + kAhead); ++j) {
      shard.PrefetchLocked(ns, keys[c.order[j]]);
    }
    for (uint32_t j = g.begin; j < end; ++j) {
      if (j + kAhead < end) shard.PrefetchLocked(ns, keys[c.order[j + kAhead]]);
      const uint32_t i = c.order[j];
      const PageEntry* e = shard.FindLocked(ns, keys[i]);
      if (e == nullptr) {
        hits = i;
        break;
      }
      c.tier_of[i] = e->tier;
    }
  }
  return hits;
}

// The touch, one lock per shard: key i of the `hits` leading ones gets stamp
// first_stamp + hits - 1 - i (tail-first: the chain's first key newest, so
// ancestors outlive their descendants in every list). A hit gone since the
// probe is skipped.
void TouchChain(PageIndex& index, NamespaceId ns, absl::Span<const PageKey> keys,
                const ChainShards& c, uint32_t hits, uint64_t first_stamp) {
  for (const ChainShards::Group& g : c.groups) {
    if (c.order[g.begin] >= hits) break;
    IndexShard& shard = index.shard(g.shard);
    absl::MutexLock lock(&shard.mu);
    // Oldest stamp first, so each page goes on top of the one before.
    for (uint32_t j = c.EndBelow(g, hits); j > g.begin; --j) {
      const uint32_t i = c.order[j - 1];
      if (PageEntry* e = shard.FindLocked(ns, keys[i])) {
        shard.RestampLocked(e, first_stamp + (hits - 1 - i));
      }
    }
  }
}

}  // namespace

LookupResult TierManager::Lookup(NamespaceId ns, absl::Span<const PageKey> keys) {
  LookupResult result;
  NamespaceState* state = impl_->core.Ns(ns);
  if (state == nullptr || keys.empty()) return result;
  ChainShards& c = chain_shards;
  c.Build(impl_->core.index, ns, keys);
  const uint32_t hits = ProbeChain(impl_->core.index, ns, keys, c);
  result.hits = hits;
  TierKind kinds[IndexShard::kMaxTiers];
  for (size_t t = 0; t < impl_->core.tiers.size(); ++t)
    kinds[t] = impl_->core.tiers[t]->tier->kind();
  result.tiers.resize(hits);
  for (uint32_t i = 0; i < hits; ++i) result.tiers[i] = kinds[c.tier_of[i]];
  if (hits > 0) TouchChain(impl_->core.index, ns, keys, c, hits, impl_->core.NextStamps(hits));
  state->lookup_hits.fetch_add(hits, std::memory_order_relaxed);
  state->lookup_misses.fetch_add(keys.size() - hits, std::memory_order_relaxed);
  return result;
}

int TierManager::TierIndex(TierKind kind) const {
  for (size_t t = 0; t < impl_->core.tiers.size(); ++t)
    if (impl_->core.tiers[t]->tier->kind() == kind) return static_cast<int>(t);
  return -1;
}

int TierManager::Locate(NamespaceId ns, const PageKey& key) const {
  uint64_t bytes;
  return Locate(ns, key, &bytes);
}

int TierManager::Locate(NamespaceId ns, const PageKey& key, uint64_t* bytes) const {
  *bytes = 0;
  if (impl_->core.Ns(ns) == nullptr) return -1;
  IndexShard& shard = impl_->core.index.ShardFor(ns, key);
  absl::MutexLock lock(&shard.mu);
  const PageEntry* e = shard.FindLocked(ns, key);
  if (e == nullptr) return -1;
  *bytes = e->slot.bytes;
  return e->tier;
}

std::optional<PagePin> TierManager::HoldForLease(NamespaceId ns, const PageKey& key) {
  if (impl_->core.Ns(ns) == nullptr) return std::nullopt;
  IndexShard& shard = impl_->core.index.ShardFor(ns, key);
  absl::MutexLock lock(&shard.mu);
  PageEntry* e = shard.FindLocked(ns, key);
  if (e == nullptr || e->holds == UINT16_MAX) return std::nullopt;
  impl_->core.PinLocked(e);
  ++e->holds;
  return PagePin(this, e, /*hold=*/true);
}

}  // namespace kvtier::tiers
