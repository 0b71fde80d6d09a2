// What Client::Ping(), Client::Stats() and Client::Tenants() return: plain
// values, so a program built against the installed headers needs no protobuf
// (the wire schema's classes are private to libkvtier-client). The fields are
// those of docs/PROTOCOL.md's STATS, PING and TENANTS replies under the same
// names; `kvtierctl stats --json` prints every field of the reply, including
// the prefetch and shared-cache blocks that are not mirrored here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvtier {

struct PingResult {
  std::string version;         // the daemon's version, e.g. "0.2.0"
  uint64_t uptime_ms = 0;
  std::string namespace_name;  // who the daemon thinks this session is
  bool admin = false;
};

// One tenant, as TENANTS (admin sessions only) lists it.
struct TenantSummary {
  std::string name;
  bool admin = false;
  uint64_t pages = 0;
  uint64_t bytes = 0;
  std::map<std::string, uint64_t> tier_bytes;           // by tier name ("host", "nvme", ...)
  std::map<std::string, uint64_t> tier_quota_bytes;     // absent: no quota
  std::map<std::string, uint64_t> tier_reserved_bytes;  // absent: no reserve
};

struct DaemonSummary {
  std::string version;
  uint64_t uptime_ms = 0;
  uint32_t sessions = 0;
  uint64_t requests = 0;
  uint64_t request_errors = 0;
  uint64_t rss_bytes = 0;
  uint64_t rss_anon_bytes = 0;  // excludes the shared-memory arenas
  uint64_t index_pages = 0;
  std::string device;           // "cuda:0 …", "emulated (host memory)" or "none"
  int32_t metrics_port = 0;     // 0: no /metrics endpoint
};

// One tier of the store, since the daemon started.
struct TierSummary {
  std::string name;  // "hbm", "host", "nvme"
  std::string backing;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t pages = 0;
  uint64_t pinned_pages = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t demotions = 0;
  uint64_t promotions = 0;
  uint64_t dropped = 0;
  uint64_t checksum_errors = 0;
  uint64_t io_errors = 0;
};

// One namespace (the caller's own, or every one for an admin session).
struct NamespaceSummary {
  std::string name;
  uint64_t pages = 0;
  uint64_t bytes = 0;
  uint64_t lookup_hits = 0;
  uint64_t lookup_misses = 0;
  uint64_t get_hits = 0;
  uint64_t get_misses = 0;
  uint64_t puts = 0;
  uint64_t dedup_puts = 0;
  uint64_t quota_evictions = 0;
  std::map<std::string, uint64_t> tier_bytes;
};

// One request type, receipt to reply (admin sessions only).
struct RequestLatency {
  std::string request;  // "LOOKUP", "GET", ...
  uint64_t count = 0;
  uint64_t errors = 0;
  double mean_us = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p99_us = 0;
  double max_us = 0;
};

struct StatsResult {
  DaemonSummary daemon;
  std::vector<TierSummary> tiers;
  std::vector<NamespaceSummary> namespaces;
  std::vector<RequestLatency> latency;

  // The tier named `name`, or nullptr.
  const TierSummary* tier(const std::string& name) const {
    for (const TierSummary& t : tiers)
      if (t.name == name) return &t;
    return nullptr;
  }
};

}  // namespace kvtier
