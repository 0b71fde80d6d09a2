// NodeReplayer: one simulated kvtierd (a TierManager over accounting tiers)
// that runs requests one at a time the way kvtier-stress drives a daemon.
// Several of them over one SharedBacking are the daemons that share a
// remote tier; ReplayTierManager and ReplayNodes (policy_replay.h) run them.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tiers/tier_manager.h"
#include "tools/sim/accounting_tier.h"
#include "tools/sim/policy_replay.h"
#include "tools/sim/remote_tier.h"
#include "tools/sim/shared_backing.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

class NodeReplayer {
 public:
  // `backing` is required with config.remote (and outlives the replayer),
  // ignored without it.
  static absl::StatusOr<std::unique_ptr<NodeReplayer>> Create(const ReplayConfig& config,
                                                              SharedBacking* backing);
  // An empty result named for this node's tiers.
  SimResult NewResult() const;
  absl::Status Run(const SimRequest& r, SimResult& out);
  // Adds the store's counters to `out`; Internal when an accounting tier
  // saw a bad free (a bookkeeping bug).
  absl::Status Finish(SimResult& out) const;

 private:
  explicit NodeReplayer(const ReplayConfig& config)
      : config_(config), zero_(kSimPageBytes, 0), bounce_(kSimPageBytes) {}
  absl::Status AddTiers(SharedBacking* backing, std::vector<std::unique_ptr<tiers::Tier>>& owned);
  // LOOKUP, with the daemon's cluster-wide step for a chain that misses
  // locally (daemon/handlers.cc LookupChain).
  tiers::LookupResult Lookup(absl::Span<const PageKey> keys);
  uint32_t LookupAndGet(absl::Span<const PageKey> keys, SimResult& out);
  // One GET's reads: promotes pages below host; a remote page that could
  // not be promoted is read in place (a bounce read), and one whose record
  // is gone is reset (a miss). Returns the leading pages served. `keys`:
  // the pins' keys.
  size_t ReadBatch(std::vector<tiers::PagePin>& pins, absl::Span<const PageKey> keys);
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
  std::vector<uint8_t> bounce_;      // where a page read in place goes
  std::unique_ptr<tiers::TierManager> mgr_;
  tiers::NamespaceId ns_ = 0;
  struct TierView {
    const tiers::Tier* tier;  // owned by mgr_
    uint64_t high_bytes, low_bytes;
  };
  std::vector<TierView> tiers_;
  std::vector<const AccountingTier*> accounting_;  // owned by mgr_
  RemoteAccountingTier* remote_ = nullptr;         // owned by mgr_; null without one
  uint64_t adopted_ = 0;
};

}  // namespace kvtier::sim
