// ReplayTierManager and ReplayNodes: NodeReplayers (node_replayer.h) fed a
// request sequence, one node or several sharing one shared cache.
#include "tools/sim/policy_replay.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kvtier/status_macros.h"
#include "tiers/shared_cache/memory_shared_cache.h"
#include "tools/sim/node_replayer.h"

namespace kvtier::sim {
namespace {

BackingCounters BackingOf(const tiers::shared_cache::MemorySharedCache& cache) {
  const tiers::SharedCacheCounters c = cache.counters();
  BackingCounters b;
  b.sets = c.published;
  b.gets = c.fetch_keys;
  b.get_misses = c.fetch_misses;
  b.exists = c.lookup_keys;
  b.deletes = c.forgotten;
  b.lru_drops = cache.lru_drops();
  return b;
}

void AddResult(const SimResult& n, SimResult& total) {
  total.requests += n.requests;
  total.refs += n.refs;
  total.hits += n.hits;
  for (size_t i = 0; i < n.tier_hits.size() && i < total.tier_hits.size(); ++i)
    total.tier_hits[i].hits += n.tier_hits[i].hits;
  total.evictions += n.evictions;
  total.demotions += n.demotions;
  total.promotions += n.promotions;
  total.dropped += n.dropped;
  total.not_stored += n.not_stored;
  total.remote.Add(n.remote);
}

}  // namespace

absl::StatusOr<RemoteAdmission> ParseRemoteAdmission(absl::string_view name) {
  if (name == "all") return RemoteAdmission::kAll;
  if (name == "reused") return RemoteAdmission::kReused;
  if (name == "put") return RemoteAdmission::kPut;
  return absl::InvalidArgumentError(
      absl::StrCat("remote admission '", name, "': expected all, reused or put"));
}

absl::string_view RemoteAdmissionName(RemoteAdmission a) {
  switch (a) {
    case RemoteAdmission::kAll:
      return "all";
    case RemoteAdmission::kReused:
      return "reused";
    case RemoteAdmission::kPut:
      return "put";
  }
  return "?";
}

absl::StatusOr<SimResult> ReplayTierManager(absl::Span<const SimRequest> requests,
                                            const ReplayConfig& config) {
  ASSIGN_OR_RETURN(NodesResult r, ReplayNodes(requests, config, 1));
  return std::move(r.nodes[0]);
}

absl::StatusOr<NodesResult> ReplayNodes(absl::Span<const SimRequest> requests,
                                        const ReplayConfig& config, uint32_t nodes) {
  if (nodes == 0) return absl::InvalidArgumentError("nodes must be >= 1");
  if (config.remote && config.remote->shared_pages == 0)
    return absl::InvalidArgumentError("shared cache: the cluster must hold at least one page");
  const absl::Time start = absl::Now();
  // One cluster for all nodes; it outlives their stores (declared first).
  tiers::shared_cache::MemorySharedCache cache(
      config.remote ? config.remote->shared_pages * kSimPageBytes : 0);
  std::vector<std::unique_ptr<NodeReplayer>> replayers;
  NodesResult out;
  for (uint32_t i = 0; i < nodes; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<NodeReplayer> r, NodeReplayer::Create(config, &cache));
    out.nodes.push_back(r->NewResult());
    replayers.push_back(std::move(r));
  }
  out.total = replayers[0]->NewResult();
  out.total.capacity_pages *= nodes;
  for (size_t i = 0; i < requests.size(); ++i) {
    const size_t node = i % nodes;  // requests alternate between the nodes
    RETURN_IF_ERROR(replayers[node]->Run(requests[i], out.nodes[node]));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (uint32_t i = 0; i < nodes; ++i) {
    RETURN_IF_ERROR(replayers[i]->Finish(out.nodes[i]));
    out.nodes[i].seconds = seconds;
    AddResult(out.nodes[i], out.total);
  }
  out.total.seconds = seconds;
  if (config.remote) {
    out.backing = BackingOf(cache);
    out.backing_records = cache.records();
  }
  return out;
}

}  // namespace kvtier::sim
