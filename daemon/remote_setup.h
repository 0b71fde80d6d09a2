// The shared cache in the daemon (tiers/shared_cache/): built from
// DaemonConfig::remote when --remote_seeds names a Redis Cluster, with each
// tenant's sealing keys (derived from --remote_secret_file and the tenant's
// token) and Redis ACL user.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "daemon/tenants.h"
#include "tiers/shared_cache/shared_cache.h"

namespace kvtier::daemon {

// A cluster that does not answer yet is no error (the cache starts down and
// retries with backoff). InvalidArgument for bad seeds or a build without
// hiredis; NotFound for an unreadable --remote_password_file; the secret
// file's own errors (unreadable, readable by others, malformed) name it.
absl::StatusOr<std::unique_ptr<tiers::SharedCache>> CreateSharedCache(
    const DaemonConfig& config, const TenantRegistry& tenants);

}  // namespace kvtier::daemon
