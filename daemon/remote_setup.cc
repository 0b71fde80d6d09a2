// CreateSharedCache (remote_setup.h). Without hiredis the build has no
// shared cache and DaemonConfig::Validate refuses --remote_seeds.
#include "daemon/remote_setup.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"
#ifdef KVTIER_HAVE_REMOTE
#include "tiers/shared_cache/cache_keys.h"
#include "tiers/shared_cache/redis_shared_cache.h"
#endif

namespace kvtier::daemon {

namespace {

absl::StatusOr<std::string> FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line))
    return absl::NotFoundError(absl::StrCat("--remote_password_file: cannot read ", path));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace

absl::StatusOr<std::unique_ptr<tiers::SharedCache>> CreateSharedCache(
    const DaemonConfig& config, const TenantRegistry& tenants) {
#ifdef KVTIER_HAVE_REMOTE
  namespace sc = tiers::shared_cache;
  sc::RedisSharedCacheConfig rc;
  rc.cluster.seeds = config.remote.seeds;
  rc.cluster.user = config.remote.user;
  if (!config.remote.password_file.empty()) {
    ASSIGN_OR_RETURN(rc.cluster.password, FirstLine(config.remote.password_file));
  }
  rc.cluster.connect_timeout = config.remote.connect_timeout;
  rc.cluster.command_timeout = config.remote.command_timeout;
  ASSIGN_OR_RETURN(sc::ClusterSecrets secrets, sc::LoadSecretFile(config.remote.secret_file));
  for (const Tenant& t : tenants.tenants()) {
    // The tenant's token is its secret: a same-named tenant with another
    // token (another fleet, another deployment) derives another key and
    // reads nothing of this one's.
    ASSIGN_OR_RETURN(rc.tenant_keys[t.name], sc::DeriveTenantKeys(secrets, t.name, t.token));
    if (t.redis_user.empty()) continue;
    rc.ns_credentials[t.name] = {t.redis_user, t.redis_password};
    spdlog::info("shared cache: tenant '{}' as Redis user '{}'", t.name, t.redis_user);
  }
  if (secrets.secrets.size() > 1)
    spdlog::info("shared cache: {}: records sealed by the previous secret are still opened",
                 config.remote.secret_file);
  rc.max_page_bytes = config.host.slab_bytes;
  return sc::CreateRedisSharedCache(rc);
#else
  (void)tenants;
  return absl::InvalidArgumentError("--remote_seeds: this kvtierd was built without hiredis");
#endif
}

}  // namespace kvtier::daemon
