// The daemon's figures in two shapes: the Prometheus text exposition format
// (served by MetricsHttpServer) and the latency part of a STATS reply. Both
// read only thread-safe sources: a TierManager snapshot, the atomics of
// RequestMetrics and /proc, so they may run on any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/latency.h"
#include "kvtier.pb.h"
#include "prefetch/prefetcher.h"
#include "tiers/shared_cache/shared_cache.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::daemon {

struct ProcessFigures {
  std::string version;
  double uptime_s = 0;
  uint64_t rss_bytes = 0;
  uint64_t rss_anon_bytes = 0;  // excludes the shared-memory arenas
};

// Reads "VmRSS:" and "RssAnon:" (kB) from /proc/self/status.
void ReadRss(uint64_t* rss, uint64_t* anon);

// Prometheus text format 0.0.4: every family with # HELP and # TYPE, names
// kvtier_* following Prometheus' conventions (base units: seconds, bytes;
// counters end in _total), so `promtool check metrics` passes; labels tier /
// namespace / type. Namespaces are all of them: the endpoint is for the
// operator (loopback unless --metrics_address says otherwise). The shared
// cache and prefetch families appear when the daemon has them.
std::string RenderPrometheus(
    const tiers::StoreSnapshot& snap, const RequestMetrics& requests, const ProcessFigures& process,
    const std::optional<tiers::SharedCacheCounters>& shared = std::nullopt,
    const std::optional<prefetch::PrefetchCounters>& prefetch = std::nullopt);

// One LatencyStats per request type that has been seen.
void FillLatency(const RequestMetrics& requests, wire::StatsReply* out);

// `value` escaped for a label value (backslash, double quote, newline).
std::string EscapeLabel(absl::string_view value);

}  // namespace kvtier::daemon
