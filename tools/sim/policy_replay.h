// Replays requests through the real tiers::TierManager over accounting-only
// tiers, doing per request what kvtier-stress asks of the daemon: LOOKUP the
// chain, GET the leading hits (pin, promote NVMe pages to host as the
// daemon's GET does), PUT the misses with parents, PUT the decode pages.
// The daemon's evictor thread is replaced by synchronous EvictTo calls at
// the points where the daemon kicks it. ReplayNodes runs several such
// daemons, each its own store, sharing one remote tier.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tiers/tier_manager.h"
#include "tools/sim/accounting_tier.h"
#include "tools/sim/remote_tier.h"
#include "tools/sim/shared_backing.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

// The remote tier below NVMe (kvtierd --remote_seeds): one cluster shared
// by every node of a ReplayNodes run.
struct SimRemoteConfig {
  uint64_t shared_pages = 0;  // the cluster's capacity (its maxmemory, LRU)
  uint64_t node_pages = 0;    // what each node keeps there by its own count (--remote_bytes)
  RemoteAdmission admission = RemoteAdmission::kAll;
};

struct ReplayConfig {
  TierSize host;
  std::optional<TierSize> nvme;  // the second tier, as kvtierd --nvme_bytes
  std::optional<SimRemoteConfig> remote;  // the third, below NVMe (needs nvme)
  // kvtierd's defaults; start_evictor_thread is ignored (always off).
  tiers::TierManagerConfig store;
  bool decode = true;  // PUT decode pages as kvtier-stress does
  // Pages per GET and per PUT call, as kvtier-stress --batch_pages (each
  // call commits on its own and kicks the evictor); 0: a whole chain per call.
  uint32_t batch_pages = 32;
  // When the stand-in evictor runs: after each daemon call that can kick it
  // (GET, PUT: an evictor that keeps up between requests), or after every
  // page reserved (one that never lags).
  enum class EvictAt { kCall, kPage };
  EvictAt evict_at = EvictAt::kCall;
};

// Runs every request in order from an empty store. Errors only for a bad
// configuration (e.g. a tier of zero pages). A remote tier runs on a
// cluster of its own (one node: ReplayNodes with nodes = 1).
absl::StatusOr<SimResult> ReplayTierManager(absl::Span<const SimRequest> requests,
                                            const ReplayConfig& config);

struct NodesResult {
  std::vector<SimResult> nodes;  // per node, in node order
  SimResult total;               // every count summed over the nodes
  BackingCounters backing;       // the shared cluster's (with a remote tier)
  uint64_t backing_records = 0;  // records in the cluster at the end
};

// `nodes` daemons of `config` each (each its own host, NVMe and remote-tier
// accounting), request i going to node i % nodes, all sharing one cluster
// of config.remote->shared_pages when config.remote is set. InvalidArgument
// for nodes == 0.
absl::StatusOr<NodesResult> ReplayNodes(absl::Span<const SimRequest> requests,
                                        const ReplayConfig& config, uint32_t nodes);

}  // namespace kvtier::sim
