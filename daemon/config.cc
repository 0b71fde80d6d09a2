// Defaults and validation of the daemon configuration.
#include "daemon/config.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/endpoint.h"
#include "daemon/metrics_http.h"
#include "kvtier/paths.h"
#include "kvtier/status_macros.h"

namespace kvtier::daemon {

void DaemonConfig::ApplyDefaults() {
  if (ipc_socket.empty() && tcp_endpoint.empty()) ipc_socket = DefaultSocketPath();
  if (state_dir.empty()) state_dir = DefaultStateDir();
  if (nvme.dir.empty()) nvme.dir = state_dir + "/nvme";
}

absl::Status DaemonConfig::Validate() const {
  if (ipc_socket.empty() && tcp_endpoint.empty())
    return absl::InvalidArgumentError("no endpoint: set --socket and/or --tcp");
  if (ipc_socket.size() > 100)
    return absl::InvalidArgumentError(absl::StrCat(
        "ipc socket path '", ipc_socket, "' is longer than the 100 bytes a unix socket allows"));
  if (!tcp_endpoint.empty()) RETURN_IF_ERROR(ResolveTcpEndpoint(tcp_endpoint, allow_non_loopback_tcp).status());
  if (copy_threads < 1 || copy_threads > 64)
    return absl::InvalidArgumentError("--copy_threads must be in [1, 64]");
  if (frontend_copy_bytes > (16ull << 20))
    return absl::InvalidArgumentError(absl::StrCat(
        "--frontend_copy_bytes ", frontend_copy_bytes,
        " is above 16 MiB: a copy that long on the frontend would stall every other request"));
  if (max_sessions < 1) return absl::InvalidArgumentError("--max_sessions must be >= 1");
  if (max_sessions_per_tenant < 1 || max_sessions_per_connection < 1)
    return absl::InvalidArgumentError(
        "--max_sessions_per_tenant and --max_sessions_per_connection must be >= 1");
  if (handshake_timeout < absl::Milliseconds(100) || handshake_timeout > absl::Minutes(5))
    return absl::InvalidArgumentError("--handshake_timeout_ms must be in [100, 300000]");
  if (max_unauthenticated_per_peer < 1 || max_unauthenticated < max_unauthenticated_per_peer)
    return absl::InvalidArgumentError(
        "need 1 <= --max_unauthenticated_per_peer <= --max_unauthenticated");
  if (max_registered_bytes_per_tenant == 0)
    return absl::InvalidArgumentError("--max_registered_bytes_per_tenant must be > 0");
  if (metrics_port < -1 || metrics_port > 65535)
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_port=", metrics_port, " must be 0 (off), -1 (any free port) or a port number"));
  if (metrics_port != 0) RETURN_IF_ERROR(IsLoopbackAddress(metrics_address).status());
  if (max_buffers_per_session < 1)
    return absl::InvalidArgumentError("--max_buffers_per_session must be >= 1");
  RETURN_IF_ERROR(warmup.Validate());
  RETURN_IF_ERROR(host.Validate());
  RETURN_IF_ERROR(store.Validate());
  if (nvme.capacity_bytes > 0) RETURN_IF_ERROR(nvme.Validate());
  if (remote.enabled()) {
#ifndef KVTIER_HAVE_REMOTE
    return absl::InvalidArgumentError("--remote_seeds: this kvtierd was built without hiredis");
#endif
    if (remote.secret_file.empty())
      return absl::InvalidArgumentError(
          "--remote_seeds needs --remote_secret_file: every daemon sharing the cluster seals and "
          "opens its tenants' records with keys derived from the same secret (create one with "
          "`head -c32 /dev/urandom | xxd -p -c64 > secret && chmod 600 secret`)");
    if (remote.connect_timeout <= absl::ZeroDuration() ||
        remote.command_timeout <= absl::ZeroDuration())
      return absl::InvalidArgumentError("--remote_*_timeout_ms must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace kvtier::daemon
