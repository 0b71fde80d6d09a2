// The remote-tier study's part of kvtier-sim's output: one table (hit rate
// by tier, differences to the baselines, the cluster commands) with a line
// per node under each multi-node setup, and its JSON form.
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "tools/sim/cluster_study.h"

namespace kvtier::sim {

std::string FormatCluster(const ClusterStudy& study);
nlohmann::json ClusterJson(const ClusterStudy& study);

}  // namespace kvtier::sim
