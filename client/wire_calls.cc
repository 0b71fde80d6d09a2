// The plain values of kvtier/stats.h from the wire replies (wire_calls.h).
// WireStats/WirePing/WireTenants themselves live in client.cc, beside the
// session they send on.
#include "client/wire_calls.h"

namespace kvtier {
namespace {

std::map<std::string, uint64_t> ToMap(const google::protobuf::Map<std::string, uint64_t>& m) {
  return std::map<std::string, uint64_t>(m.begin(), m.end());
}

}  // namespace

StatsResult ToStatsResult(const wire::StatsReply& reply) {
  StatsResult out;
  const wire::DaemonStats& d = reply.daemon();
  out.daemon = DaemonSummary{.version = d.version(),
                             .uptime_ms = d.uptime_ms(),
                             .sessions = d.sessions(),
                             .requests = d.requests(),
                             .request_errors = d.request_errors(),
                             .rss_bytes = d.rss_bytes(),
                             .rss_anon_bytes = d.rss_anon_bytes(),
                             .index_pages = d.index_pages(),
                             .device = d.device(),
                             .metrics_port = d.metrics_port()};
  for (const wire::TierStats& t : reply.tiers())
    out.tiers.push_back(TierSummary{.name = t.name(),
                                    .backing = t.backing(),
                                    .capacity_bytes = t.capacity_bytes(),
                                    .used_bytes = t.used_bytes(),
                                    .pages = t.pages(),
                                    .pinned_pages = t.pinned_pages(),
                                    .hits = t.hits(),
                                    .misses = t.misses(),
                                    .evictions = t.evictions(),
                                    .bytes_in = t.bytes_in(),
                                    .bytes_out = t.bytes_out(),
                                    .demotions = t.demotions(),
                                    .promotions = t.promotions(),
                                    .dropped = t.dropped(),
                                    .checksum_errors = t.checksum_errors(),
                                    .io_errors = t.io_errors()});
  for (const wire::NamespaceStats& n : reply.namespaces())
    out.namespaces.push_back(NamespaceSummary{.name = n.name(),
                                              .pages = n.pages(),
                                              .bytes = n.bytes(),
                                              .lookup_hits = n.lookup_hits(),
                                              .lookup_misses = n.lookup_misses(),
                                              .get_hits = n.get_hits(),
                                              .get_misses = n.get_misses(),
                                              .puts = n.puts(),
                                              .dedup_puts = n.dedup_puts(),
                                              .quota_evictions = n.quota_evictions(),
                                              .tier_bytes = ToMap(n.tier_bytes())});
  for (const wire::LatencyStats& l : reply.latency())
    out.latency.push_back(RequestLatency{.request = l.request(),
                                         .count = l.count(),
                                         .errors = l.errors(),
                                         .mean_us = l.mean_us(),
                                         .p50_us = l.p50_us(),
                                         .p90_us = l.p90_us(),
                                         .p99_us = l.p99_us(),
                                         .max_us = l.max_us()});
  return out;
}

PingResult ToPingResult(const wire::PingReply& reply) {
  return PingResult{.version = reply.version(),
                    .uptime_ms = reply.uptime_ms(),
                    .namespace_name = reply.namespace_(),
                    .admin = reply.admin()};
}

std::vector<TenantSummary> ToTenantSummaries(const wire::TenantsReply& reply) {
  std::vector<TenantSummary> out;
  for (const wire::TenantInfo& t : reply.tenants())
    out.push_back(TenantSummary{.name = t.name(),
                                .admin = t.admin(),
                                .pages = t.pages(),
                                .bytes = t.bytes(),
                                .tier_bytes = ToMap(t.tier_bytes()),
                                .tier_quota_bytes = ToMap(t.tier_quota_bytes()),
                                .tier_reserved_bytes = ToMap(t.tier_reserved_bytes())});
  return out;
}

}  // namespace kvtier
