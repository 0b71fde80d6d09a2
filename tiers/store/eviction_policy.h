// Eviction policies: the order in which a tier gives up pages, chosen per tier
// (kvtierd --eviction, kvtier-sim --eviction). Whatever the policy, the store
// keeps its rules (page_index.h): leaf-first along prefix chains, pinned and
// held pages never taken, reserves and quotas, one recency structure per
// index shard and tier across namespaces, victim search cost independent of
// the number of tenants.
//
//  - lru: one recency list; the victim is the first leaf among the oldest
//    pages.
//  - 2q: a segmented LRU with a ghost, in the manner of 2Q (Johnson &
//    Shasha, VLDB 1994) and CacheLib's MM2Q: a page enters a
//    probation segment and moves to a protected one when it is read (GET) or
//    PUT again; protected pages overflowing their share fall back to the head
//    of probation; victims come from probation's tail first. A page evicted
//    from probation leaves an 8-byte fingerprint in a ghost list of
//    ghost_share x the shard's pages, and a page PUT again while its ghost is
//    there enters protected: pages of a long one-off prompt no longer push
//    out the pages that are read again. The replay study behind the
//    parameters (protected 50%, ghost 50%) is in docs/BENCHMARKS.md
//    ("Eviction policies").
//  - arc: 2q whose protected share adapts per shard, in the manner of ARC
//    (Megiddo & Modha, FAST 2003): pages falling back from protected and
//    then evicted leave their fingerprints in a second ghost; a page PUT
//    again while remembered by the first ghost (evicted from probation
//    unreused) says recency was short of room, and shrinks the protected
//    share by a page (more while the second ghost is the larger); one
//    remembered by the second ghost says the reused pages were, and grows
//    it. The share starts at 2q's and stays within [0, the shard's pages].
//  - s3fifo: quick demotion and lazy promotion, in the manner of S3-FIFO
//    (Yang et al., SOSP 2023): a page enters a small FIFO (probation) and a
//    read or a second PUT only marks it
//    (kAccessed: no relink under the lock); when eviction reaches a marked
//    page at small's tail it moves to the main FIFO (protected, at most half
//    of the shard's pages: kS3FifoMainShare) instead
//    of going, unmarked ones go and leave a ghost, and a page PUT again
//    while its ghost is there enters main. Main is a FIFO with one bit of
//    CLOCK: a marked page reaching its tail is requeued at its head,
//    unmarked ones fall back to small's head (S3-FIFO evicts them outright;
//    here the evictor does every eviction, so they pass small once more).
//    LOOKUPs reorder nothing; other touches (a parent after its child's
//    commit, a promotion's pin) move a page to the head of its FIFO, as
//    under LRU, so that chains still lose their leaves first. A namespace's own list is
//    in arrival order under s3fifo, except for namespaces with a reserve,
//    whose lists stay LRU.
//  - prefix: prefix-aware ranks. Three lists per shard and tier, each in
//    stamp order, merged by rank = stamp + the list's offset: the chain ends
//    (pages not yet reused that no later page names as its parent: the last
//    page of a prompt's chain, a decode page) rank kPrefixEndPenalty "tier
//    capacities" of arrivals older than their stamp, pages PUT once at their
//    stamp, and reused pages (read by a GET or a promotion, PUT again, or PUT
//    again while a ghost of kPrefixGhostShare x the shard's pages remembers
//    them) kPrefixReuseBonus capacities newer. A page leaves the chain ends
//    when a child names it. The offsets are in stamps, the same for every
//    shard (so ranks compare across shards): "a capacity of arrivals" turned
//    into stamps by the stamps that passed during the tier's last window of
//    arrivals (LOOKUPs and touches take stamps too). What this buys: a
//    chain's last full page is read again far less often than the pages
//    before it (on Mooncake 5% of the time, on the Azure traces never:
//    docs/BENCHMARKS.md, "how far an online policy gets"), and a page read
//    once is read again more often than one never read; unlike 2q's
//    protected share, reused pages are not capped at half the tier: they
//    age out by rank. A namespace with a reserve keeps its own LRU list and
//    its pages rank by stamp (as chain ends do).
//
// A namespace's own picks (its quota, an operator's EVICT) and the pages of
// a namespace holding a reserve in the tier walk that namespace's own list,
// which stays LRU under every policy: the policy orders the tier-wide pick,
// where tenants' pages compete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

enum class EvictionPolicy : uint8_t { kLru = 0, k2q = 1, kArc = 2, kS3Fifo = 3, kPrefix = 4 };

// Whether the policy keeps a protected segment and a ghost (2q, arc, s3fifo,
// prefix).
inline bool Segmented(EvictionPolicy p) { return p != EvictionPolicy::kLru; }
// Whether a read marks a page instead of moving it (s3fifo).
inline bool LazyPromotion(EvictionPolicy p) { return p == EvictionPolicy::kS3Fifo; }

// Whether victims are merged from lists by rank offsets (prefix) rather than
// taken from probation, then protected.
inline bool Ranked(EvictionPolicy p) { return p == EvictionPolicy::kPrefix; }

// "lru", "2q", "arc", "s3fifo", "prefix".
absl::string_view EvictionPolicyName(EvictionPolicy p);
// The names, for messages: "lru, 2q, arc, s3fifo, prefix".
std::string EvictionPolicyChoices();
absl::StatusOr<EvictionPolicy> ParseEvictionPolicy(absl::string_view name);

// 2q's shares: protected pages at most this fraction of a shard's pages in
// the tier; ghost entries at most this fraction of them.
inline constexpr double k2qProtectedShare = 0.5;
inline constexpr double k2qGhostShare = 0.5;
// s3fifo's main FIFO: half the shard's pages, not the paper's 90%. A sweep
// over the repository's traces (docs/BENCHMARKS.md, "Issue 30: s3fifo", made
// before parents were relinked on their children's commit)
// lost up to 1.4 pp against LRU on Mooncake at 4k pages and 3.1 pp on the
// Azure code trace at 800 with 90%, and 2.0 pp there with 75%. Its ghost
// remembers up to 90% of the pages (half, as many as main holds as in the
// paper, closed 7% and 11% of the Mooncake gap at 4k and 16k instead of 8%
// and 16%).
inline constexpr double kS3FifoMainShare = 0.5;
inline constexpr double kS3FifoGhostShare = 0.9;
// prefix's offsets, in "capacities" (the tier's pages at its low
// watermark) of arrivals, and its ghost, in the shard's pages. The study
// behind them is in docs/BENCHMARKS.md ("Issue 30: prefix"): a bonus of 3
// or 12 capacities lost 1.21 and 2.85 pp against LRU where 6 lost 0.13;
// the penalty changed nothing between 1 and 10; a ghost of 2 capacities
// closed as much of the gap at 4k and 16k pages as one of 4, with a smaller
// worst loss.
inline constexpr uint64_t kPrefixEndPenalty = 3;
inline constexpr uint64_t kPrefixReuseBonus = 6;
inline constexpr double kPrefixGhostShare = 2.0;
inline double ProtectedShare(EvictionPolicy p) {
  return p == EvictionPolicy::kS3Fifo ? kS3FifoMainShare : k2qProtectedShare;
}
inline double GhostShare(EvictionPolicy p) {
  switch (p) {
    case EvictionPolicy::kS3Fifo:
      return kS3FifoGhostShare;
    case EvictionPolicy::kPrefix:
      return kPrefixGhostShare;
    default:
      return k2qGhostShare;
  }
}

// A --eviction value: one policy for every tier ("2q"), or one per tier
// ("host=2q,nvme=lru"; tiers not named: lru). `tiers` are the kinds the store
// has: naming another is an error that says which tiers there are.
absl::StatusOr<absl::flat_hash_map<TierKind, EvictionPolicy>> ParseEvictionFlag(
    absl::string_view value, const std::vector<TierKind>& tiers);

}  // namespace kvtier::tiers
