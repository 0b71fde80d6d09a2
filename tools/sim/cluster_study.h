// The shared-cache study of kvtier-sim: N daemons (each host + NVMe) sharing
// one cache beside their stores (the "remote" cluster), at each cluster
// capacity and admission asked for, next to the two setups it must beat:
// one daemon holding all N daemons' host and NVMe capacity, and N daemons
// without the shared cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tools/sim/policy_replay.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

struct ClusterStudyConfig {
  ReplayConfig node;  // one daemon: host and NVMe set, remote unset
  ReplayConfig big;   // one daemon with every node's host and NVMe (used when nodes > 1)
  std::string host_label, nvme_label, big_label;  // as given, for the report
  uint32_t nodes = 1;
  struct Capacity {
    std::string label;  // as given, e.g. "4GiB"
    uint64_t pages = 0;
  };
  std::vector<Capacity> remote;  // cluster capacities, a row each per admission (may be empty)
  std::vector<RemoteAdmission> admissions;
};

struct RemoteRow {
  std::string label;  // the capacity as given
  RemoteAdmission admission = RemoteAdmission::kAll;
  uint64_t shared_pages = 0;
  NodesResult result;
};

struct ClusterStudy {
  uint32_t nodes = 1;
  std::string host_label, nvme_label, big_label;
  uint64_t host_pages = 0, nvme_pages = 0;
  std::optional<SimResult> one_big;  // nodes > 1 only
  NodesResult no_remote;             // the nodes without the shared cache
  std::vector<RemoteRow> rows;       // admission-major, capacities in the order given
};

// InvalidArgument for capacities without an admission, or nodes == 0.
// No capacity: the baselines alone.
absl::StatusOr<ClusterStudy> RunClusterStudy(absl::Span<const SimRequest> requests,
                                             const ClusterStudyConfig& config);

}  // namespace kvtier::sim
