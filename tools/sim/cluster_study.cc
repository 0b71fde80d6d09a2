// RunClusterStudy: the baselines once, then ReplayNodes per remote row.
#include "tools/sim/cluster_study.h"

#include <cstdio>

#include "kvtier/status_macros.h"

namespace kvtier::sim {

absl::StatusOr<ClusterStudy> RunClusterStudy(absl::Span<const SimRequest> requests,
                                             const ClusterStudyConfig& config) {
  if (config.nodes == 0) return absl::InvalidArgumentError("--nodes must be >= 1");
  if (!config.remote.empty() && config.admissions.empty())
    return absl::InvalidArgumentError("no remote admission given");
  if (!config.node.nvme) return absl::InvalidArgumentError("the study needs the NVMe tier");
  ClusterStudy s;
  s.nodes = config.nodes;
  s.host_label = config.host_label;
  s.nvme_label = config.nvme_label;
  s.big_label = config.big_label;
  s.host_pages = config.node.host.slots;
  s.nvme_pages = config.node.nvme->slots;
  if (config.nodes > 1) {
    ReplayConfig big = config.big;
    big.remote.reset();
    ASSIGN_OR_RETURN(s.one_big, ReplayTierManager(requests, big));
  }
  ReplayConfig plain = config.node;
  plain.remote.reset();
  ASSIGN_OR_RETURN(s.no_remote, ReplayNodes(requests, plain, config.nodes));
  for (RemoteAdmission admission : config.admissions) {
    for (const ClusterStudyConfig::Capacity& cap : config.remote) {
      ReplayConfig rc = config.node;
      rc.remote = SimRemoteConfig{cap.pages, admission};
      RemoteRow row{cap.label, admission, cap.pages, {}};
      ASSIGN_OR_RETURN(row.result, ReplayNodes(requests, rc, config.nodes));
      std::fprintf(stderr, "kvtier-sim: %u nodes, remote %s (%llu pages), admission %s: %.2f%%\n",
                   config.nodes, cap.label.c_str(), static_cast<unsigned long long>(cap.pages),
                   std::string(RemoteAdmissionName(admission)).c_str(),
                   100 * row.result.total.hit_rate());
      s.rows.push_back(std::move(row));
    }
  }
  return s;
}

}  // namespace kvtier::sim
