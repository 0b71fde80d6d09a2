// TierManager::Lookup: LOOKUP's probe of a prefix chain. A chain's keys are
// spread over the index shards, and a shard lock per key, twice (probe, then
// the tail-first recency touch), was most of a LOOKUP's cost (issue 14). So
// the shards of up to kSegment consecutive keys are locked together, in
// ascending order, for one pass that probes the leading hits and touches
// them: each shard locked once and each key found once per segment, and the
// probe's table loads run ahead across shards. Also the store's other
// probes: where a page lives (Locate, TierIndex) and lease holds
// (HoldForLease), which pin without reading.
#include <algorithm>
#include <optional>
#include <vector>

#include "tiers/store/internal/page_index.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {
namespace {

// A LOOKUP holds every shard its segment's keys fall in (all of them, for
// a segment longer than a few times the shard count) for as long as it
// probes and touches the segment: a long chain is taken kSegment keys at a
// time, so one tenant's 4,096-key LOOKUP never stops every other request's
// shard for more than a segment (a few microseconds).
constexpr uint32_t kSegment = 64;

// The shards of a chain's keys. One per thread, reused: a LOOKUP allocates
// nothing once its thread has seen its longest chain.
struct ChainShards {
  std::vector<uint32_t> shard_of;  // by key
  std::vector<uint64_t> hash;      // by key: its hash in the shard's table
  std::vector<PageEntry*> entry;   // by key: the probe's hit (valid under the locks)
  std::vector<uint8_t> tier_of;    // by key: the tier the probe found it in
  std::vector<uint32_t> locked;    // the segment's distinct shards, ascending
  std::vector<uint8_t> seen;       // by shard: in `locked`; all 0 between calls

  void Build(const PageIndex& index, NamespaceId ns, absl::Span<const PageKey> keys) {
    const auto n = static_cast<uint32_t>(keys.size());
    if (seen.size() < index.num_shards()) seen.resize(index.num_shards(), 0);
    shard_of.resize(n);
    hash.resize(n);
    entry.resize(n);
    tier_of.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      shard_of[i] = index.ShardIndex(ns, keys[i]);
      hash[i] = IndexShard::HashOf(ns, keys[i]);
    }
  }
  // `locked` = the shards of keys [begin, end), ascending.
  void SegmentShards(uint32_t begin, uint32_t end) {
    locked.clear();
    for (uint32_t i = begin; i < end; ++i) {
      if (!seen[shard_of[i]]) {
        seen[shard_of[i]] = 1;
        locked.push_back(shard_of[i]);
      }
    }
    for (uint32_t s : locked) seen[s] = 0;
    std::sort(locked.begin(), locked.end());
  }
};

thread_local ChainShards chain_shards;

// Holds the chain's shard locks, taken in ascending shard order. This is
// the one place in the store that holds more than one shard lock; every
// other path holds one at a time, so a single global order (ascending)
// cannot deadlock (Abseil's deadlock detection checks it in test builds).
// The set is dynamic, which the static analysis cannot follow: the *Locked
// calls under it assert each shard's lock (Mutex::AssertHeld).
class ShardSetLock {
 public:
  ShardSetLock(PageIndex& index,
               absl::Span<const uint32_t> ascending) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : index_(index),
        shards_(ascending) {
    for (uint32_t s : shards_) index_.shard(s).mu.Lock();
  }
  ~ShardSetLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto it = shards_.rbegin(); it != shards_.rend(); ++it) index_.shard(*it).mu.Unlock();
  }
  ShardSetLock(const ShardSetLock&) = delete;
  ShardSetLock& operator=(const ShardSetLock&) = delete;

 private:
  PageIndex& index_;
  absl::Span<const uint32_t> shards_;
};

}  // namespace

LookupResult TierManager::Lookup(NamespaceId ns, absl::Span<const PageKey> keys) {
  LookupResult result;
  NamespaceState* state = impl_->core.Ns(ns);
  if (state == nullptr || keys.empty()) return result;
  PageIndex& index = impl_->core.index;
  ChainShards& c = chain_shards;
  c.Build(index, ns, keys);
  const auto n = static_cast<uint32_t>(keys.size());
  // Key i's stamp is first + n - 1 - i, one block for the whole chain taken
  // at its first hit (gaps past a miss cost nothing; a chain that misses at
  // once takes none): tail-first, the chain's first key newest, so
  // ancestors outlive their descendants in every list.
  uint64_t first = 0;
  uint32_t hits = 0;
  for (uint32_t begin = 0; begin < n && hits == begin; begin += kSegment) {
    const uint32_t end = std::min(n, begin + kSegment);
    c.SegmentShards(begin, end);
    ShardSetLock lock(index, c.locked);
    // Each *Locked call below asserts its shard's lock (held by `lock`):
    // the analysis cannot follow a lock set.
    auto shard_at = [&](uint32_t i) -> IndexShard& { return index.shard(c.shard_of[i]); };
    // A probe is two dependent cache misses at millions of pages (the
    // table's bucket, then the entry): the buckets of the next few keys are
    // loaded ahead, whatever their shard, so their misses overlap. (Loading
    // their entries too, once their buckets were in, made it slower.)
    constexpr uint32_t kAhead = 8;
    auto prefetch_bucket = [&](uint32_t i) {
      IndexShard& ahead = shard_at(i);
      ahead.mu.AssertHeld();
      ahead.PrefetchLocked(c.hash[i]);
    };
    for (uint32_t i = begin + 1; i < std::min(end, begin + kAhead); ++i) prefetch_bucket(i);
    for (; hits < end; ++hits) {
      if (hits + kAhead < end) prefetch_bucket(hits + kAhead);
      IndexShard& shard = shard_at(hits);
      shard.mu.AssertHeld();
      PageEntry* e = shard.FindLocked(ns, keys[hits], c.hash[hits]);
      if (e == nullptr) break;  // the chain ends here: nothing past it is touched
      c.entry[hits] = e;
      c.tier_of[hits] = e->tier;
    }
    // Each restamp unlinks its page from two lists, writing both neighbours
    // in each (other chains' pages, far apart): their loads start together
    // here rather than one restamp after another.
    for (uint32_t i = begin; i < hits; ++i) {
      const PageEntry* e = c.entry[i];
      for (const PageEntry* p :
           {e->ns_links.prev, e->ns_links.next, e->tier_links.prev, e->tier_links.next})
        if (p != nullptr) __builtin_prefetch(p, 1);
    }
    if (begin == 0 && hits > 0) first = impl_->core.NextStamps(n);
    // Oldest stamp first, so each page goes on top of the one before.
    for (uint32_t i = hits; i > begin; --i) {
      IndexShard& shard = shard_at(i - 1);
      shard.mu.AssertHeld();
      shard.RestampLocked(c.entry[i - 1], first + (n - i));
    }
  }
  result.hits = hits;
  TierKind kinds[IndexShard::kMaxTiers];
  for (size_t t = 0; t < impl_->core.tiers.size(); ++t)
    kinds[t] = impl_->core.tiers[t]->tier->kind();
  result.tiers.resize(hits);
  for (uint32_t i = 0; i < hits; ++i) result.tiers[i] = kinds[c.tier_of[i]];
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
