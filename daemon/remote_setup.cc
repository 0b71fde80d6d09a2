// AddRemoteTier (remote_setup.h). Without hiredis the build has no remote
// tier and DaemonConfig::Validate refuses --remote_seeds.
#include "daemon/remote_setup.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"
#ifdef KVTIER_HAVE_REMOTE
#include "tiers/remote/remote_tier.h"
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

absl::Status AddRemoteTier(const DaemonConfig& config, const TenantRegistry& tenants,
                           std::vector<std::unique_ptr<tiers::Tier>>& tiers) {
  if (!config.remote.enabled()) return absl::OkStatus();
#ifdef KVTIER_HAVE_REMOTE
  tiers::remote::RemoteTierConfig rc;
  rc.cluster.seeds = config.remote.seeds;
  rc.cluster.user = config.remote.user;
  if (!config.remote.password_file.empty()) {
    ASSIGN_OR_RETURN(rc.cluster.password, FirstLine(config.remote.password_file));
  }
  for (const Tenant& t : tenants.tenants()) {
    if (t.redis_user.empty()) continue;
    rc.ns_credentials[t.name] = {t.redis_user, t.redis_password};
    spdlog::info("remote tier: tenant '{}' as Redis user '{}'", t.name, t.redis_user);
  }
  rc.cluster.connect_timeout = config.remote.connect_timeout;
  rc.cluster.command_timeout = config.remote.command_timeout;
  rc.capacity_bytes = config.remote.capacity_bytes;
  rc.max_page_bytes = config.host.slab_bytes;
  ASSIGN_OR_RETURN(auto remote, tiers::remote::CreateRemoteTier(rc));
  spdlog::info("remote tier: {} MiB, {}", remote->capacity_bytes() >> 20, remote->backing());
  tiers.push_back(std::move(remote));
  return absl::OkStatus();
#else
  return absl::InvalidArgumentError("--remote_seeds: this kvtierd was built without hiredis");
#endif
}

}  // namespace kvtier::daemon
