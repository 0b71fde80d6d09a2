// Replays requests through the real tiers::TierManager over accounting-only
// tiers, doing per request what kvtier-stress asks of the daemon: LOOKUP the
// chain, GET the leading hits (pin, promote NVMe pages to host as the
// daemon's GET does), PUT the misses with parents, PUT the decode pages.
// The daemon's evictor thread is replaced by synchronous EvictTo calls at
// the points where the daemon kicks it. ReplayNodes runs several such
// daemons, each its own store, sharing one shared cache beside the stores
// (tiers/shared_cache/, in its in-memory twin).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tiers/store/tier_manager.h"
#include "tools/sim/accounting_tier.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

// kvtierd's --remote_admission: pages leaving a store from its last tier
// are published to the shared cache (all, or reused ones), or put: every
// PUT's page is published when filled and evictions are not published again.
enum class RemoteAdmission { kAll, kReused, kPut };
absl::StatusOr<RemoteAdmission> ParseRemoteAdmission(absl::string_view name);
absl::string_view RemoteAdmissionName(RemoteAdmission a);

// The shared cache beside the stores (kvtierd --remote_seeds): one cluster
// shared by every node of a ReplayNodes run. Its records belong to the
// cluster, not to a node, so there is no per-node budget in it.
struct SimRemoteConfig {
  uint64_t shared_pages = 0;  // the cluster's capacity in pages (its maxmemory, LRU)
  RemoteAdmission admission = RemoteAdmission::kAll;
};

// The shared cache's commands, all nodes together, named after the Redis
// commands that serve them in kvtierd.
struct BackingCounters {
  uint64_t sets = 0;        // records stored (published)
  uint64_t gets = 0;        // keys GETs fetched
  uint64_t get_misses = 0;  // of those: no record (dropped since the LOOKUP)
  uint64_t exists = 0;      // keys LOOKUP misses checked
  uint64_t deletes = 0;     // records a DELETE forgot (kvtier-stress sends none)
  uint64_t lru_drops = 0;   // records the cluster's own LRU dropped
};

struct ReplayConfig {
  TierSize host;
  std::optional<TierSize> nvme;  // the second tier, as kvtierd --nvme_bytes
  std::optional<SimRemoteConfig> remote;  // the shared cache beside the store
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
// configuration (e.g. a tier of zero pages). With config.remote the node
// has a shared cache of its own (ReplayNodes with nodes = 1).
absl::StatusOr<SimResult> ReplayTierManager(absl::Span<const SimRequest> requests,
                                            const ReplayConfig& config);

struct NodesResult {
  std::vector<SimResult> nodes;  // per node, in node order
  SimResult total;               // every count summed over the nodes
  BackingCounters backing;       // the shared cache's (with config.remote)
  uint64_t backing_records = 0;  // records in the cluster at the end
};

// `nodes` daemons of `config` each (each its own host and NVMe), request i
// going to node i % nodes, all sharing one shared cache of
// config.remote->shared_pages pages when config.remote is set (a
// MemorySharedCache: its callbacks run at once, so the replay stays
// single-threaded and deterministic). InvalidArgument for nodes == 0.
absl::StatusOr<NodesResult> ReplayNodes(absl::Span<const SimRequest> requests,
                                        const ReplayConfig& config, uint32_t nodes);

}  // namespace kvtier::sim
