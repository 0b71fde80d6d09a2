// The remote tier in the daemon: built from DaemonConfig::remote and put
// below NVMe, when --remote_seeds names a cluster.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "daemon/config.h"
#include "daemon/tenants.h"
#include "tiers/tier.h"

namespace kvtier::daemon {

// Appends the remote tier to `tiers` when config.remote is enabled, with
// each tenant's own Redis ACL user when the tenants file names one; a
// cluster that does not answer yet is no error (the tier starts down and
// retries with backoff). InvalidArgument for bad seeds; NotFound for an
// unreadable --remote_password_file.
absl::Status AddRemoteTier(const DaemonConfig& config, const TenantRegistry& tenants,
                           std::vector<std::unique_ptr<tiers::Tier>>& tiers);

}  // namespace kvtier::daemon
