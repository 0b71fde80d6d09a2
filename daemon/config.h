// kvtierd configuration: what the flags fill in, with embedded defaults that
// need no configuration at all. Validate() runs before anything is created.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/buffer_warmer.h"
#include "prefetch/prefetcher.h"
#include "tiers/host/host_tier.h"
#include "tiers/nvme/nvme_tier.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::daemon {

// The shared cache (a Redis Cluster every daemon of a fleet shares, beside
// the store): plain options here, so the config builds without hiredis.
struct RemoteOptions {
  std::vector<std::string> seeds;  // "host:port" of any cluster nodes; empty: none
  std::string secret_file;         // the fleet's sealing secret(s) (cache_keys.h)
  absl::Duration connect_timeout = absl::Milliseconds(500);
  absl::Duration command_timeout = absl::Seconds(2);
  // The Redis ACL user of tenants without their own ("redis_user" in the
  // tenants file); empty: the cluster's default user, no AUTH.
  std::string user;
  std::string password_file;  // its password, first line (never a flag value)
  bool enabled() const { return !seeds.empty(); }
};

struct DaemonConfig {
  std::string ipc_socket;   // path of the ipc:// socket; empty = no ipc endpoint
  std::string tcp_endpoint; // e.g. "tcp://127.0.0.1:7450"; empty = none
  bool allow_non_loopback_tcp = false;
  std::string state_dir;
  std::string tenants_file;  // empty: built-in "default" tenant, no token
  tiers::HostTierConfig host;
  // NVMe tier: capacity 0 disables it; dir empty means <state_dir>/nvme.
  tiers::NvmeTierConfig nvme;
  RemoteOptions remote;
  tiers::TierManagerConfig store;
  // LOOKUP lookahead, PREFETCH, GET policies (prefetch_handlers.cc).
  prefetch::PrefetcherConfig prefetch;
  int copy_threads = 2;
  // A GET or PUT of at most this many bytes whose pages are all in RAM (a
  // PUT's: with no checksum, durable copy or publishing to do) is copied by
  // the frontend itself: a copy this short costs less than the two thread
  // hand-offs of a copy job. 0: every GET and PUT goes to the copy engine.
  uint64_t frontend_copy_bytes = 256 << 10;
  int max_sessions = 1024;
  // Per-tenant and per-connection limits (the tenants file may override the
  // per-tenant ones), so no tenant can take what the others need.
  int max_sessions_per_tenant = 64;
  int max_sessions_per_connection = 16;
  // The handshake (connection_guard.h): a connection that has not
  // authenticated within handshake_timeout is dropped; at most this many
  // unauthenticated connections per peer uid (tcp: address) and in all.
  absl::Duration handshake_timeout = absl::Seconds(5);
  int max_unauthenticated_per_peer = 3;
  int max_unauthenticated = 64;
  // CURVE instead of PLAIN: the daemon's secret key (Z85, 40 characters, a
  // file of mode 0600); tenants then authenticate by curve_public_key.
  std::string curve_secret_key_file;
  uint64_t max_registered_bytes_per_tenant = 64ull << 30;
  int max_buffers_per_session = 64;
  // Registered buffers are mapped in off the frontend after REGISTER.
  BufferWarmerConfig warmup;
  absl::Duration session_idle_timeout = absl::Minutes(30);
  // Prometheus endpoint: 0 = off, -1 = any free port (logged, and in STATS
  // daemon.metrics_port), on metrics_address (an IP literal). Loopback by
  // default: /metrics names every tenant and its traffic, with no
  // authentication, so another address is the operator's explicit choice.
  int metrics_port = 0;
  std::string metrics_address = "127.0.0.1";

  // Fills empty paths with the defaults of kvtier/paths.h.
  void ApplyDefaults();
  absl::Status Validate() const;
  std::string IpcEndpoint() const { return "ipc://" + ipc_socket; }
  // The Unix socket that takes buffers by fd, beside the ipc socket.
  std::string BufferSocket() const { return ipc_socket + ".fds"; }
  // Mode of the ipc socket file: 0600 (this uid only) unless --socket_group
  // names a group, then 0660 with that group (one uid per tenant).
  std::string socket_group;
};

}  // namespace kvtier::daemon
