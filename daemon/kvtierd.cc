// kvtierd: the kvtier daemon. With no flags it serves the default tenant on
// the default ipc socket with a 1 GiB host tier; `--help` lists the flags and
// `--flagfile=FILE` reads them from a file.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "daemon/allocator.h"
#include "daemon/client_buffer.h"
#include "daemon/daemon.h"
#include "daemon/tenants.h"
#include "kvtier/byte_size.h"
#include "kvtier/cli.h"
#include "kvtier/errors.h"
#include "kvtier/paths.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, socket, "", "ipc socket path (default $XDG_RUNTIME_DIR/kvtier/kvtierd.sock or /tmp/kvtier-$UID/kvtierd.sock); 'none' disables ipc");
ABSL_FLAG(std::string, tcp, "", "tcp endpoint for remote clients, e.g. tcp://127.0.0.1:7450 (default: none)");
ABSL_FLAG(bool, allow_non_loopback_tcp, false, "allow --tcp on a non-loopback address");
ABSL_FLAG(std::string, state_dir, "", "state directory (default $XDG_STATE_HOME/kvtier or ~/.local/state/kvtier)");
ABSL_FLAG(std::string, tenants_file, "", "JSON tenants file; without it one token-less admin tenant 'default' exists");
ABSL_FLAG(std::string, host_bytes, "1GiB", "host (RAM) tier capacity, e.g. 1GiB, 512MiB");
ABSL_FLAG(std::string, host_slab_bytes, "16MiB", "host arena slab size (the largest page the host tier holds)");
ABSL_FLAG(std::string, hugepages, "auto", "host arena hugepages: auto, on, off");
ABSL_FLAG(std::string, nvme_dir, "", "NVMe tier directory: data file + RocksDB index (default <state_dir>/nvme); must support O_DIRECT (not tmpfs)");
ABSL_FLAG(std::string, nvme_bytes, "4GiB", "NVMe tier capacity; 0 disables the tier");
ABSL_FLAG(bool, reformat_nvme, false, "when --nvme_bytes or --host_slab_bytes differ from what the NVMe data file was formatted for, drop its cached pages and reformat it (logged with their number); without it such a start is refused (exit 2) and nothing is lost");
ABSL_FLAG(int, nvme_io_threads, 1, "NVMe I/O threads (one io_uring each)");
ABSL_FLAG(int, nvme_queue_depth, 64, "NVMe in-flight I/Os per ring");
ABSL_FLAG(double, nvme_prefetch_share, 0.25, "share of --nvme_queue_depth prefetch reads may fill (the rest stays free for demand reads); (0, 1]");
ABSL_FLAG(double, nvme_writeback_share, 0.125, "share of --nvme_queue_depth write-back may fill while reads run or wait; (0, 1]");
ABSL_FLAG(std::string, write_policy, "write-back", "write-back (a page reaches NVMe when RAM evicts it) or write-through (every PUT also written to NVMe before it is acknowledged, so a restart finds it)");
ABSL_FLAG(bool, promote_on_get, true, "move a page read from NVMe up to the host tier");
ABSL_FLAG(bool, prefetch_lookahead, true, "LOOKUP starts promoting its NVMe hits to the host tier, pinned until their GET or lease");
ABSL_FLAG(int, prefetch_threads, 2, "prefetch I/O threads: promotions in flight at once");
ABSL_FLAG(int, prefetch_lease_ms, 2000, "how long a prefetched page stays pinned waiting for its GET (PREFETCH may ask for another)");
ABSL_FLAG(int, prefetch_deadline_ms, 1000, "a lookahead promotion not started within this is dropped");
ABSL_FLAG(std::string, prefetch_max_pinned, "0", "bytes prefetch may hold pinned (leases + in flight); 0 = a quarter of the host tier");
ABSL_FLAG(std::string, nvme_admission, "all", "which host evictions are written to NVMe: all, or reused (pages read or PUT again since stored)");
ABSL_FLAG(std::string, remote_seeds, "", "shared cache beside the store: host:port of Redis Cluster nodes every daemon of the fleet shares, comma-separated (any nodes of the cluster; loopback in tests); empty: none");
ABSL_FLAG(std::string, remote_secret_file, "", "shared cache: file (mode 0600) with the fleet's secret, 64 hex digits on a line, and optionally the previous one on a second line during a rotation; every daemon sharing the cluster needs it. Records are sealed per tenant with a key derived from it and the tenant's token (docs/OPERATIONS.md)");
ABSL_FLAG(std::string, remote_admission, "all", "which pages the shared cache gets: all (every page leaving the store from its last tier), reused (of those, pages read or PUT again since stored), or put (write-through: every PUT's page, at once)");
ABSL_FLAG(std::string, remote_user, "", "shared cache: Redis ACL user of tenants without their own \"redis_user\" (empty: the cluster's default user, no AUTH)");
ABSL_FLAG(std::string, remote_password_file, "", "shared cache: file whose first line is --remote_user's password");
ABSL_FLAG(int, remote_connect_timeout_ms, 500, "shared cache: connect timeout per node");
ABSL_FLAG(int, remote_command_timeout_ms, 2000, "shared cache: bound on each socket read/write of a batch; a node that exceeds it is skipped (a miss) for a backoff");
ABSL_FLAG(double, high_watermark, 0.95, "background eviction starts above this fraction of a tier");
ABSL_FLAG(bool, nvme_reclaim_copies_first, false, "when NVMe needs room, first drop its copies of pages that are also in RAM (more distinct pages cached, but each is written again when RAM evicts it); off: evict NVMe-only pages, LRU");
ABSL_FLAG(double, clean_fraction, 0.10, "the evictor keeps this fraction of each RAM tier written back to NVMe (clean) ahead of need, so requests make room without disk writes; 0: off");
ABSL_FLAG(double, low_watermark, 0.90, "background eviction stops below this fraction of a tier");
ABSL_FLAG(int, copy_threads, 2, "copy engine worker threads");
ABSL_FLAG(std::string, frontend_copy_bytes, "256KiB",
          "a GET or PUT of at most this many bytes whose pages are all in RAM is copied on "
          "the frontend thread, without a copy-engine round trip (0: never; at most 16MiB)");
ABSL_FLAG(std::string, eviction, "lru",
          "eviction policy: lru; 2q (pages read or PUT again are protected from a flood of "
          "one-off pages); arc (2q whose protected share adapts, as ARC's); or s3fifo (a small "
          "and a main FIFO, reads only mark pages, as S3-FIFO's); or prefix (a chain's unread last "
          "page goes first, pages read or PUT again last, each by age); "
          "docs/OPERATIONS.md, \"Eviction policies\"; one for every tier, or per tier as "
          "host=2q,nvme=lru");
ABSL_FLAG(std::string, hbm_bytes, "0", "HBM (GPU) tier capacity, e.g. 16GiB; 0 = no HBM tier");
ABSL_FLAG(std::string, hbm_device, "auto", "device backend: auto (CUDA when a GPU is present and --hbm_bytes > 0, else emulated), cuda, emulated, none");
ABSL_FLAG(int, hbm_device_ordinal, 0, "CUDA device of the HBM tier and of client GPU buffers");
ABSL_FLAG(int, max_sessions, 1024, "maximum concurrent sessions");
ABSL_FLAG(int, max_sessions_per_tenant, 64, "maximum concurrent sessions of one tenant (its \"max_sessions\" in the tenants file overrides this)");
ABSL_FLAG(int, max_sessions_per_connection, 16, "maximum concurrent sessions opened over one client connection");
ABSL_FLAG(int, handshake_timeout_ms, 5000, "a connection that has not authenticated (the ZeroMQ handshake, PLAIN or CURVE) within this is dropped");
ABSL_FLAG(int, max_unauthenticated_per_peer, 3, "connections of one peer uid (ipc; tcp: address) that may be open without having authenticated yet; more are shut at once");
ABSL_FLAG(int, max_unauthenticated, 64, "connections that may be open without having authenticated yet, in all");
ABSL_FLAG(std::string, curve_secret_key_file, "", "CURVE instead of PLAIN: file (mode 0600) with this daemon's secret key (Z85, 40 characters; `kvtierctl curve-keygen` makes a pair); tenants authenticate by their curve_public_key and every connection is encrypted");
ABSL_FLAG(std::string, max_registered_bytes_per_tenant, "64GiB", "client memory one tenant may have registered at once, over all its sessions (its \"max_registered_bytes\" in the tenants file overrides this)");
ABSL_FLAG(std::string, socket_group, "", "give the ipc socket to this group with mode 0660 (one uid per tenant, all in the group); default: the socket is 0600, this uid only");
ABSL_FLAG(std::string, prefetch_max_leased_per_tenant, "0", "bytes of prefetched pages one tenant may hold leased at once, at most (budget / active tenants); 0 = half of --prefetch_max_pinned");
ABSL_FLAG(bool, buffer_warmup, true, "after REGISTER_BUFFER, map the pages the client's buffer holds into the daemon on a background thread (never its holes), so the first GET costs what later ones do; STATS namespaces[].warmup.pending_bytes is 0 once warm");
ABSL_FLAG(bool, buffer_write_fd, true, "a GET into a part of a registered shm buffer the daemon has not yet mapped in writes through the buffer's file descriptor instead of faulting the mapping in page by page (false: through the mapping, as before)");
ABSL_FLAG(int, session_idle_timeout_s, 1800, "drop sessions idle for this many seconds");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");
ABSL_FLAG(int, metrics_port, 0, "Prometheus /metrics endpoint on --metrics_address at this port (9464 is the usual choice); 0 = off, -1 = any free port (logged)");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1", "IP address (a literal, IPv4 or IPv6) the /metrics endpoint listens on; anything but loopback exposes every tenant's name and traffic, unauthenticated, to whoever can reach the port (a warning is logged at start): restrict it with a firewall");

namespace {

std::atomic<bool> g_stop{false};

// Blocks SIGINT/SIGTERM in every thread and waits for them on one thread, so
// shutdown is an ordinary flag the frontend polls.
std::thread StartSignalThread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("received {}, stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
    g_stop = true;
  });
}

// A byte-size flag, with the flag's name in the error.
absl::StatusOr<uint64_t> BytesFlag(const absl::Flag<std::string>& flag) {
  auto bytes = kvtier::ParseByteSize(absl::GetFlag(flag));
  if (!bytes.ok())
    return absl::InvalidArgumentError(absl::StrCat("--", flag.Name(), ": ", bytes.status().message()));
  return bytes;
}

absl::Status RemoteFromFlags(kvtier::daemon::DaemonConfig& c) {
  using Admission = kvtier::tiers::TierManagerConfig::Admission;
  c.remote.seeds = absl::StrSplit(absl::GetFlag(FLAGS_remote_seeds), ',', absl::SkipWhitespace());
  c.remote.secret_file = absl::GetFlag(FLAGS_remote_secret_file);
  c.remote.connect_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_remote_connect_timeout_ms));
  c.remote.command_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_remote_command_timeout_ms));
  c.remote.user = absl::GetFlag(FLAGS_remote_user);
  c.remote.password_file = absl::GetFlag(FLAGS_remote_password_file);
  const std::string admission = absl::GetFlag(FLAGS_remote_admission);
  if (admission == "all") c.store.shared_admission = Admission::kAll;
  else if (admission == "reused") c.store.shared_admission = Admission::kReusedOnly;
  else if (admission == "put") c.store.shared_write_through = true;
  else return absl::InvalidArgumentError("--remote_admission must be all, reused or put");
  return absl::OkStatus();
}

absl::StatusOr<kvtier::daemon::DaemonConfig> ConfigFromFlags() {
  kvtier::daemon::DaemonConfig c;
  c.ipc_socket = absl::GetFlag(FLAGS_socket);
  c.tcp_endpoint = absl::GetFlag(FLAGS_tcp);
  if (c.ipc_socket.empty()) c.ipc_socket = kvtier::DefaultSocketPath();
  if (c.ipc_socket == "none") c.ipc_socket.clear();
  c.allow_non_loopback_tcp = absl::GetFlag(FLAGS_allow_non_loopback_tcp);
  c.state_dir = absl::GetFlag(FLAGS_state_dir);
  c.tenants_file = absl::GetFlag(FLAGS_tenants_file);
  ASSIGN_OR_RETURN(c.host.capacity_bytes, BytesFlag(FLAGS_host_bytes));
  ASSIGN_OR_RETURN(c.host.slab_bytes, BytesFlag(FLAGS_host_slab_bytes));
  std::string huge = absl::GetFlag(FLAGS_hugepages);
  if (huge == "auto") c.host.hugepages = kvtier::tiers::HugepageMode::kAuto;
  else if (huge == "on") c.host.hugepages = kvtier::tiers::HugepageMode::kOn;
  else if (huge == "off") c.host.hugepages = kvtier::tiers::HugepageMode::kOff;
  else return absl::InvalidArgumentError("--hugepages must be auto, on or off");
  ASSIGN_OR_RETURN(c.nvme.capacity_bytes, BytesFlag(FLAGS_nvme_bytes));
  c.nvme.dir = absl::GetFlag(FLAGS_nvme_dir);
  c.nvme.slab_bytes = c.host.slab_bytes;
  c.nvme.reformat = absl::GetFlag(FLAGS_reformat_nvme);
  c.nvme.io_threads = static_cast<uint32_t>(std::max(1, absl::GetFlag(FLAGS_nvme_io_threads)));
  c.nvme.queue_depth = static_cast<uint32_t>(std::max(1, absl::GetFlag(FLAGS_nvme_queue_depth)));
  c.nvme.prefetch_share = absl::GetFlag(FLAGS_nvme_prefetch_share);
  c.nvme.writeback_share = absl::GetFlag(FLAGS_nvme_writeback_share);
  c.store.promote_on_get = absl::GetFlag(FLAGS_promote_on_get);
  c.prefetch.lookahead = absl::GetFlag(FLAGS_prefetch_lookahead);
  c.prefetch.io_threads = static_cast<uint32_t>(std::max(0, absl::GetFlag(FLAGS_prefetch_threads)));
  if (absl::GetFlag(FLAGS_prefetch_lease_ms) < 0 || absl::GetFlag(FLAGS_prefetch_deadline_ms) <= 0)
    return absl::InvalidArgumentError("--prefetch_lease_ms must be >= 0 and --prefetch_deadline_ms > 0");
  c.prefetch.policy.default_lease = absl::Milliseconds(absl::GetFlag(FLAGS_prefetch_lease_ms));
  c.prefetch.policy.lookahead_deadline = absl::Milliseconds(absl::GetFlag(FLAGS_prefetch_deadline_ms));
  ASSIGN_OR_RETURN(c.prefetch.max_pinned_bytes, BytesFlag(FLAGS_prefetch_max_pinned));
  std::string policy = absl::GetFlag(FLAGS_write_policy);
  if (policy == "write-through") c.store.write_through = true;
  else if (policy != "write-back") return absl::InvalidArgumentError("--write_policy must be write-back or write-through");
  std::string admission = absl::GetFlag(FLAGS_nvme_admission);
  if (admission == "all") c.store.persistent_admission = kvtier::tiers::TierManagerConfig::Admission::kAll;
  else if (admission == "reused") c.store.persistent_admission = kvtier::tiers::TierManagerConfig::Admission::kReusedOnly;
  else return absl::InvalidArgumentError("--nvme_admission must be all or reused");
  RETURN_IF_ERROR(RemoteFromFlags(c));
  {
    // The tiers this daemon will have, for --eviction's per-tier form.
    std::vector<kvtier::tiers::TierKind> kinds;
    ASSIGN_OR_RETURN(uint64_t hbm, BytesFlag(FLAGS_hbm_bytes));
    if (hbm > 0 && absl::GetFlag(FLAGS_hbm_device) != "none") kinds.push_back(kvtier::tiers::TierKind::kHbm);
    if (c.host.capacity_bytes > 0) kinds.push_back(kvtier::tiers::TierKind::kHost);
    if (c.nvme.capacity_bytes > 0) kinds.push_back(kvtier::tiers::TierKind::kNvme);
    ASSIGN_OR_RETURN(c.store.eviction, kvtier::tiers::ParseEvictionFlag(absl::GetFlag(FLAGS_eviction), kinds));
  }
  c.store.high_watermark = absl::GetFlag(FLAGS_high_watermark);
  c.store.clean_fraction = absl::GetFlag(FLAGS_clean_fraction);
  c.store.reclaim_copies_first = absl::GetFlag(FLAGS_nvme_reclaim_copies_first);
  c.store.low_watermark = absl::GetFlag(FLAGS_low_watermark);
  c.copy_threads = absl::GetFlag(FLAGS_copy_threads);
  ASSIGN_OR_RETURN(c.frontend_copy_bytes, BytesFlag(FLAGS_frontend_copy_bytes));
  c.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  c.max_sessions_per_tenant = absl::GetFlag(FLAGS_max_sessions_per_tenant);
  c.max_sessions_per_connection = absl::GetFlag(FLAGS_max_sessions_per_connection);
  c.handshake_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_handshake_timeout_ms));
  c.max_unauthenticated_per_peer = absl::GetFlag(FLAGS_max_unauthenticated_per_peer);
  c.max_unauthenticated = absl::GetFlag(FLAGS_max_unauthenticated);
  c.curve_secret_key_file = absl::GetFlag(FLAGS_curve_secret_key_file);
  ASSIGN_OR_RETURN(c.max_registered_bytes_per_tenant, BytesFlag(FLAGS_max_registered_bytes_per_tenant));
  c.socket_group = absl::GetFlag(FLAGS_socket_group);
  ASSIGN_OR_RETURN(c.prefetch.max_leased_bytes_per_ns, BytesFlag(FLAGS_prefetch_max_leased_per_tenant));
  c.warmup.enabled = absl::GetFlag(FLAGS_buffer_warmup);
  c.session_idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_session_idle_timeout_s));
  c.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  c.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  // A malformed address is a usage error (exit 2: the unit does not retry
  // it), like the other flags parsed here.
  if (c.metrics_port != 0) RETURN_IF_ERROR(kvtier::daemon::IsLoopbackAddress(c.metrics_address).status());
  return c;
}

absl::StatusOr<kvtier::daemon::DeviceOptions> DeviceFromFlags() {
  kvtier::daemon::DeviceOptions d;
  auto mode = kvtier::tiers::hbm::ParseDeviceMode(absl::GetFlag(FLAGS_hbm_device));
  if (!mode.ok()) return absl::InvalidArgumentError(absl::StrCat("--hbm_device: ", mode.status().message()));
  d.mode = *mode;
  ASSIGN_OR_RETURN(d.hbm_bytes, BytesFlag(FLAGS_hbm_bytes));
  d.ordinal = absl::GetFlag(FLAGS_hbm_device_ordinal);
  if (d.ordinal < 0) return absl::InvalidArgumentError("--hbm_device_ordinal must be >= 0");
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "the kvtier daemon: keeps LLM KV-cache pages in GPU memory, host RAM and NVMe and "
      "serves them to clients over ZeroMQ (ipc, or loopback tcp). Stops cleanly on "
      "SIGTERM/SIGINT (exit 0).\n"
      "  kvtierd [--socket=PATH] [--state_dir=DIR] [--tenants_file=FILE] [--flag=value ...]");
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ kvtierd: %v");
#if !KVTIER_TEST_HOOKS
  // Debian's Abseil keeps Mutex deadlock detection on: a graph update per
  // lock, about half of a batched LOOKUP's time in the index (issue 14). Lock
  // order is checked by the test builds (hooks on) and clang's
  // -Wthread-safety; a release daemon does not pay for it per request.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif

  // Before any thread starts (daemon/allocator.h: what a handshake flood
  // leaves in the heap).
  if (!kvtier::daemon::FixAllocatorThresholds())
    spdlog::warn(
        "glibc refused the allocator thresholds; freed handshake frames may stay resident");

  auto config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "kvtierd: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  auto device = DeviceFromFlags();
  if (!device.ok()) {
    std::fprintf(stderr, "kvtierd: %s\n", std::string(device.status().message()).c_str());
    return 2;
  }
  // No descriptor kept: every copy into a client buffer uses the mapping.
  if (!absl::GetFlag(FLAGS_buffer_write_fd)) kvtier::daemon::ClientBuffer::set_fd_limit(0);
  std::thread signals = StartSignalThread();
  auto daemon = kvtier::daemon::Daemon::Create(*std::move(config), *device);
  if (!daemon.ok()) {
    // A refusal the operator must settle exits 2, like a bad flag: systemd
    // does not restart into the same refusal (kvtier/errors.h).
    const bool operator_error = kvtier::NeedsOperator(daemon.status());
    std::fprintf(stderr, "kvtierd: %s\n",
                 operator_error ? std::string(daemon.status().message()).c_str()
                                : daemon.status().ToString().c_str());
    std::_Exit(operator_error ? 2 : 1);
  }
  spdlog::info("kvtierd {} ready", KVTIER_VERSION);
  absl::Status st = (*daemon)->Run(g_stop);
  daemon->reset();
  if (!g_stop) pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  if (!st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  spdlog::info("stopped cleanly");
  return 0;
}
