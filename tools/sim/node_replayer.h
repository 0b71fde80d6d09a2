// NodeReplayer: one simulated kvtierd (a TierManager over accounting tiers)
// that runs requests one at a time the way kvtier-stress drives a daemon.
// Several of them over one MemorySharedCache are the daemons that share a
// cache beside their stores; ReplayTierManager and ReplayNodes
// (policy_replay.h) run them.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tiers/shared_cache/memory_shared_cache.h"
#include "tiers/store/tier_manager.h"
#include "tools/sim/accounting_tier.h"
#include "tools/sim/policy_replay.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

// Not thread-safe: the replay is single-threaded. It counts on the cache's
// callbacks running before each call returns (MemorySharedCache's contract),
// so it takes that class, not the SharedCache interface.
class NodeReplayer {
 public:
  // `cache` is required with config.remote (and outlives the replayer),
  // ignored without it.
  static absl::StatusOr<std::unique_ptr<NodeReplayer>> Create(
      const ReplayConfig& config, tiers::shared_cache::MemorySharedCache* cache);
  // An empty result named for this node's tiers.
  SimResult NewResult() const;
  // One request; its commands to the shared cache are added to out.remote.
  absl::Status Run(const SimRequest& r, SimResult& out);
  // Adds the store's counters to `out`; Internal when an accounting tier
  // saw a bad free (a bookkeeping bug).
  absl::Status Finish(SimResult& out) const;

 private:
  explicit NodeReplayer(const ReplayConfig& config) : config_(config), zero_(kSimPageBytes, 0) {}
  absl::Status AddTiers(std::vector<std::unique_ptr<tiers::Tier>>& owned);
  // LOOKUP, with the daemon's cluster-wide step for a chain that misses
  // locally (daemon/handlers.cc LookupChain, shared_handlers.cc
  // SubmitLookup): the leading keys past the local hits that the shared
  // cache holds count as remote hits.
  tiers::LookupResult Lookup(absl::Span<const PageKey> keys);
  absl::StatusOr<uint32_t> LookupAndGet(absl::Span<const PageKey> keys, SimResult& out);
  // Before a GET (daemon/shared_handlers.cc StartSharedFetch): the keys
  // missing here are fetched from the shared cache and stored as ordinary
  // PUTs (Reserve, FillFetched, CommitAll). Adds the pages stored to
  // out.remote.adopted.
  absl::Status FetchMissing(absl::Span<const PageKey> keys, SimResult& out);
  // One GET's reads: promotes pages below host (a page that is not
  // promoted is read in place, which accounting tiers cannot fail).
  // Returns the leading pages served.
  size_t ReadBatch(std::vector<tiers::PagePin>& pins);
  // Returns how many pages at the batch's end the store could not take.
  absl::StatusOr<size_t> PutBatch(absl::Span<const PageKey> keys, const PageKey& parent);
  absl::Status Put(absl::Span<const PageKey> keys, const PageKey& parent, SimResult& out);
  // What the daemon's evictor thread does when kicked: each tier above its
  // high watermark is brought down to its low one, top tier first.
  void DriveEvictor();
  void MaybeEvictPerPage() {
    if (config_.evict_at == ReplayConfig::EvictAt::kPage) DriveEvictor();
  }

  const ReplayConfig config_;
  const std::vector<uint8_t> zero_;  // the bytes every PUT "writes"
  std::unique_ptr<tiers::TierManager> mgr_;
  tiers::NamespaceId ns_ = 0;
  struct TierView {
    const tiers::Tier* tier;  // owned by mgr_
    uint64_t high_bytes, low_bytes;
  };
  std::vector<TierView> tiers_;
  std::vector<const AccountingTier*> accounting_;  // owned by mgr_
  // Shared with the other nodes; null without config.remote.
  tiers::shared_cache::MemorySharedCache* cache_ = nullptr;
};

}  // namespace kvtier::sim
