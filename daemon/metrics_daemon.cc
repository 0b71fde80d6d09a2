// The daemon's side of metrics: starting the /metrics endpoint, rendering it
// from thread-safe sources only (TierManager snapshot, RequestMetrics atomics,
// immutable start time), and timing requests from receipt to reply.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "daemon/metrics.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

std::string PendingKey(absl::string_view routing_id, uint64_t request_id) {
  std::string key(routing_id);
  key.append(reinterpret_cast<const char*>(&request_id), sizeof(request_id));
  return key;
}

}  // namespace

absl::Status Daemon::StartMetrics() {
  if (config_.metrics_port == 0) return absl::OkStatus();
  MetricsHttpOptions o;
  o.address = config_.metrics_address;
  o.port = config_.metrics_port < 0 ? 0 : config_.metrics_port;
  ASSIGN_OR_RETURN(const bool loopback, IsLoopbackAddress(o.address));
  ASSIGN_OR_RETURN(metrics_http_, MetricsHttpServer::Start(o, [this] { return RenderMetrics(); }));
  const std::string where = HostPort(o.address, metrics_http_->port());
  spdlog::info("metrics on http://{}/metrics", where);
  // Said at every start, not only in the docs: the endpoint has no
  // authentication and its labels name every tenant.
  if (!loopback)
    spdlog::warn(
        "--metrics_address={}: /metrics is reachable beyond this host at {}, without "
        "authentication; its series name every tenant (namespace label) and its traffic and "
        "cache use. Restrict who can reach that port (a firewall, or the unit's IPAddressAllow=)",
        o.address, where);
  return absl::OkStatus();
}

// Runs on the metrics thread: touches nothing the frontend owns.
std::string Daemon::RenderMetrics() const {
  ProcessFigures p;
  p.version = KVTIER_VERSION;
  p.uptime_s = absl::ToDoubleSeconds(absl::Now() - started_);
  ReadRss(&p.rss_bytes, &p.rss_anon_bytes);
  std::optional<tiers::SharedCacheCounters> shared;
  if (shared_) shared = shared_->counters();
  std::optional<prefetch::PrefetchCounters> prefetch;
  if (prefetcher_) prefetch = prefetcher_->counters();
  return RenderPrometheus(store_->Snapshot(), metrics_, p, shared, prefetch);
}

void Daemon::EndRequest(const std::string& routing_id, uint64_t request_id, int type,
                        int64_t start_ns, bool failed) {
  metrics_.CountRequest(type);
  if (failed) metrics_.CountError(type);
  if (replied_) {
    metrics_.RecordLatency(type, static_cast<uint64_t>(MonotonicNanos() - start_ns));
    return;
  }
  // A copy job will send the reply; OnCompletion finishes the timing.
  pending_[PendingKey(routing_id, request_id)] = PendingRequest{type, start_ns};
}

void Daemon::EndPendingRequest(const zmq::message_t& routing_id, const zmq::message_t& header) {
  if (pending_.empty()) return;
  wire::Response r;
  if (!r.ParseFromArray(header.data(), static_cast<int>(header.size()))) return;
  EndPendingRequest(
      absl::string_view(static_cast<const char*>(routing_id.data()), routing_id.size()),
      r.request_id(), r.code() != wire::OK);
}

void Daemon::EndPendingRequest(absl::string_view routing_id, uint64_t request_id, bool failed) {
  auto it = pending_.find(PendingKey(routing_id, request_id));
  if (it == pending_.end()) return;
  metrics_.RecordLatency(it->second.type,
                         static_cast<uint64_t>(MonotonicNanos() - it->second.start_ns));
  if (failed) metrics_.CountError(it->second.type);
  pending_.erase(it);
}

}  // namespace kvtier::daemon
