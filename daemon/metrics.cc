// Prometheus text exposition of the store snapshot and request metrics, and
// the latency rows of STATS. Families are tables of (name, help, accessor) so
// a new counter is one line.
#include "daemon/metrics.h"

#include <fstream>
#include <functional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"

namespace kvtier::daemon {
namespace {

class Exposition {
 public:
  void Family(absl::string_view name, absl::string_view type, absl::string_view help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(absl::string_view name, absl::string_view labels, uint64_t value) {
    absl::StrAppend(&out_, name, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}", " ",
                    value, "\n");
  }
  void Sample(absl::string_view name, absl::string_view labels, double value) {
    absl::StrAppend(&out_, name, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}", " ",
                    absl::StrFormat("%.9g", value), "\n");
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

struct TierFamily {
  const char* name;
  const char* type;
  const char* help;
  std::function<uint64_t(const tiers::TierSnapshot&)> get;
  // Non-zero: the value is get() times this, as a float (microsecond sums
  // exposed in seconds, Prometheus' base unit).
  double scale = 0;
};

const std::vector<TierFamily>& TierFamilies() {
  using T = tiers::TierSnapshot;
  static const auto* families = new std::vector<TierFamily>{
      {"kvtier_tier_capacity_bytes", "gauge", "Capacity of the tier.", [](const T& t) { return t.capacity_bytes; }},
      {"kvtier_tier_used_bytes", "gauge", "Bytes of slots in use.", [](const T& t) { return t.used_bytes; }},
      {"kvtier_tier_pages", "gauge", "Pages resident in the tier.", [](const T& t) { return t.pages; }},
      {"kvtier_tier_pinned_pages", "gauge", "Pages pinned (in flight).", [](const T& t) { return t.pinned_pages; }},
      {"kvtier_tier_hits_total", "counter", "GET keys served from the tier.", [](const T& t) { return t.hits; }},
      {"kvtier_tier_misses_total", "counter", "GET keys looked for in the tier and not found.", [](const T& t) { return t.misses; }},
      {"kvtier_tier_evictions_total", "counter", "Pages evicted from the tier (demoted or dropped).", [](const T& t) { return t.evictions; }},
      {"kvtier_tier_demotions_total", "counter", "Pages moved down out of the tier.", [](const T& t) { return t.demotions; }},
      {"kvtier_tier_promotions_total", "counter", "Pages moved up into the tier.", [](const T& t) { return t.promotions; }},
      {"kvtier_tier_dropped_total", "counter", "Pages that left the store from the tier.", [](const T& t) { return t.dropped; }},
      {"kvtier_tier_admission_drops_total", "counter", "Drops refused by the persistent-tier admission filter.", [](const T& t) { return t.admission_drops; }},
      {"kvtier_tier_checksum_errors_total", "counter", "Pages read back with a wrong checksum (served as misses).", [](const T& t) { return t.checksum_errors; }},
      {"kvtier_tier_io_read_bytes_total", "counter", "Bytes copied out of the tier's slots.", [](const T& t) { return t.bytes_out; }},
      {"kvtier_tier_io_written_bytes_total", "counter", "Bytes copied into the tier's slots.", [](const T& t) { return t.bytes_in; }},
      {"kvtier_tier_io_inflight", "gauge", "Device I/Os in flight (NVMe).", [](const T& t) { return t.io.io_inflight; }},
      {"kvtier_tier_io_errors_total", "counter", "Failed device I/Os (NVMe).", [](const T& t) { return t.io.io_errors; }},
      {"kvtier_tier_recovered_pages", "gauge", "Pages recovered from the persistent index at start.", [](const T& t) { return t.durable.recovered_pages; }},
      {"kvtier_tier_clean_pages", "gauge", "Pages in the tier that also have a durable copy on NVMe.", [](const T& t) { return t.clean_pages; }},
      {"kvtier_tier_cleaned_total", "counter", "Pages written back ahead of need by the cleaner.", [](const T& t) { return t.cleaned; }},
      {"kvtier_tier_durability_failures_total", "counter", "PUT pages not stored because their durable copy failed.", [](const T& t) { return t.durability_failures; }},
      {"kvtier_tier_frontend_io_total", "counter", "I/Os done on the frontend thread (a bug: always 0).", [](const T& t) { return t.io.forbidden_io; }},
      // I/O classes (tiers/common/io_class.h): count and summed latency per class;
      // rate(..._latency_seconds_total) / rate(..._total) is the mean latency.
      {"kvtier_tier_io_demand_total", "counter", "Device I/Os a request waited for (NVMe).", [](const T& t) { return t.io.class_ios[0]; }},
      {"kvtier_tier_io_demand_latency_seconds_total", "counter", "Summed latency of demand I/Os, seconds (NVMe).", [](const T& t) { return t.io.class_latency_us[0]; }, 1e-6},
      {"kvtier_tier_io_prefetch_total", "counter", "Device I/Os of promotions ahead of need (NVMe).", [](const T& t) { return t.io.class_ios[1]; }},
      {"kvtier_tier_io_prefetch_latency_seconds_total", "counter", "Summed latency of prefetch I/Os, seconds (NVMe).", [](const T& t) { return t.io.class_latency_us[1]; }, 1e-6},
      {"kvtier_tier_io_writeback_total", "counter", "Device I/Os of cleaning and demotion (NVMe).", [](const T& t) { return t.io.class_ios[2]; }},
      {"kvtier_tier_io_writeback_latency_seconds_total", "counter", "Summed latency of write-back I/Os, seconds (NVMe).", [](const T& t) { return t.io.class_latency_us[2]; }, 1e-6},
  };
  return *families;
}

struct NamespaceFamily {
  const char* name;
  const char* type;
  const char* help;
  std::function<uint64_t(const tiers::NamespaceSnapshot&)> get;
};

const std::vector<NamespaceFamily>& NamespaceFamilies() {
  using N = tiers::NamespaceSnapshot;
  static const auto* families = new std::vector<NamespaceFamily>{
      {"kvtier_namespace_pages", "gauge", "Pages of the namespace in the store.", [](const N& n) { return n.pages; }},
      {"kvtier_namespace_lookup_hits_total", "counter", "LOOKUP keys that were leading hits.", [](const N& n) { return n.lookup_hits; }},
      {"kvtier_namespace_lookup_misses_total", "counter", "LOOKUP keys after the first miss.", [](const N& n) { return n.lookup_misses; }},
      {"kvtier_namespace_get_hits_total", "counter", "Pages served by GET.", [](const N& n) { return n.get_hits; }},
      {"kvtier_namespace_get_misses_total", "counter", "GET keys not present.", [](const N& n) { return n.get_misses; }},
      {"kvtier_namespace_puts_total", "counter", "Pages newly stored by PUT.", [](const N& n) { return n.puts; }},
      {"kvtier_namespace_dedup_puts_total", "counter", "PUTs of present keys.", [](const N& n) { return n.dedup_puts; }},
      {"kvtier_namespace_quota_evictions_total", "counter", "Pages evicted to keep the namespace in its quota.", [](const N& n) { return n.quota_evictions; }},
  };
  return *families;
}

std::string TierLabel(const tiers::TierSnapshot& t) {
  return absl::StrCat("tier=\"", std::string(tiers::TierName(t.kind)), "\"");
}

std::string NsLabel(const tiers::NamespaceSnapshot& n) {
  return absl::StrCat("namespace=\"", EscapeLabel(n.name), "\"");
}

void RenderDaemon(const RequestMetrics& requests, const ProcessFigures& p, Exposition& x) {
  x.Family("kvtier_build_info", "gauge", "Always 1; the version is a label.");
  x.Sample("kvtier_build_info", absl::StrCat("version=\"", EscapeLabel(p.version), "\""),
           uint64_t{1});
  x.Family("kvtier_uptime_seconds", "gauge", "Seconds since the daemon started.");
  x.Sample("kvtier_uptime_seconds", "", p.uptime_s);
  x.Family("kvtier_sessions", "gauge", "Open client sessions.");
  x.Sample("kvtier_sessions", "", requests.sessions.load(std::memory_order_relaxed));
  x.Family("kvtier_rss_bytes", "gauge", "Resident set size of the daemon.");
  x.Sample("kvtier_rss_bytes", "", p.rss_bytes);
  x.Family("kvtier_rss_anon_bytes", "gauge", "Resident anonymous memory (outside the shm arenas).");
  x.Sample("kvtier_rss_anon_bytes", "", p.rss_anon_bytes);
}

// Request types that were ever seen; a type with no traffic has no series.
std::vector<int> SeenTypes(const RequestMetrics& r) {
  std::vector<int> types;
  for (int t = 0; t < RequestMetrics::kMaxType; ++t)
    if (r.requests(t) > 0 || r.histogram(t).Snap().count > 0) types.push_back(t);
  return types;
}

void RenderRequests(const RequestMetrics& r, Exposition& x) {
  const std::vector<int> types = SeenTypes(r);
  auto label = [](int t) { return absl::StrCat("type=\"", RequestMetrics::TypeName(t), "\""); };
  x.Family("kvtier_requests_total", "counter", "Requests received, by type.");
  for (int t : types) x.Sample("kvtier_requests_total", label(t), r.requests(t));
  x.Family("kvtier_request_errors_total", "counter", "Requests answered with an error, by type.");
  for (int t : types) x.Sample("kvtier_request_errors_total", label(t), r.errors(t));
  const char* h = "kvtier_request_duration_seconds";
  x.Family(h, "histogram", "Frontend receipt to reply sent, copies included, by type.");
  for (int t : types) {
    const LatencyHistogram::Snapshot s = r.histogram(t).Snap();
    uint64_t cumulative = 0;
    for (int i = 0; i < LatencyHistogram::kFiniteBuckets; ++i) {
      cumulative += s.buckets[i];
      x.Sample("kvtier_request_duration_seconds_bucket",
               absl::StrCat(label(t), ",le=\"",
                            absl::StrFormat("%.10g", LatencyHistogram::UpperBoundNs(i) * 1e-9), "\""),
               cumulative);
    }
    cumulative += s.buckets[LatencyHistogram::kFiniteBuckets];
    x.Sample("kvtier_request_duration_seconds_bucket", absl::StrCat(label(t), ",le=\"+Inf\""),
             cumulative);
    x.Sample("kvtier_request_duration_seconds_sum", label(t), double(s.sum_ns) * 1e-9);
    // _count equals the +Inf bucket, as the format requires, even when a
    // record raced the snapshot.
    x.Sample("kvtier_request_duration_seconds_count", label(t), cumulative);
  }
}

void RenderStore(const tiers::StoreSnapshot& snap, Exposition& x) {
  for (const TierFamily& f : TierFamilies()) {
    x.Family(f.name, f.type, f.help);
    for (const auto& t : snap.tiers) {
      if (f.scale != 0) x.Sample(f.name, TierLabel(t), double(f.get(t)) * f.scale);
      else x.Sample(f.name, TierLabel(t), f.get(t));
    }
  }
  for (const NamespaceFamily& f : NamespaceFamilies()) {
    x.Family(f.name, f.type, f.help);
    for (const auto& n : snap.namespaces) x.Sample(f.name, NsLabel(n), f.get(n));
  }
  // Per (namespace, tier): every tier appears for every namespace, 0 included.
  x.Family("kvtier_namespace_bytes", "gauge", "Page bytes of the namespace in a tier.");
  for (const auto& n : snap.namespaces)
    for (const auto& t : snap.tiers) {
      auto it = n.tier_bytes.find(t.kind);
      x.Sample("kvtier_namespace_bytes", absl::StrCat(TierLabel(t), ",", NsLabel(n)),
               it == n.tier_bytes.end() ? uint64_t{0} : it->second);
    }
  x.Family("kvtier_namespace_quota_bytes", "gauge", "Quota of the namespace in a tier (absent: none).");
  for (const auto& n : snap.namespaces)
    for (const auto& t : snap.tiers) {
      auto it = n.tier_quota_bytes.find(t.kind);
      if (it != n.tier_quota_bytes.end() && it->second > 0)
        x.Sample("kvtier_namespace_quota_bytes", absl::StrCat(TierLabel(t), ",", NsLabel(n)),
                 it->second);
    }
}

// One unlabelled series per row: the daemon-wide blocks (shared cache,
// prefetcher) that STATS reports as plain counters and gauges.
struct Row {
  const char* name;
  const char* type;  // "counter" or "gauge"
  const char* help;
  uint64_t value;
};

void RenderRows(absl::Span<const Row> rows, Exposition& x) {
  for (const Row& r : rows) {
    x.Family(r.name, r.type, r.help);
    x.Sample(r.name, "", r.value);
  }
}

// The shared cache beside the store: one series per counter.
void RenderSharedCache(const tiers::SharedCacheCounters& c, Exposition& x) {
  const Row rows[] = {
      {"kvtier_shared_cache_published_total", "counter", "Records stored in the shared cache.", c.published},
      {"kvtier_shared_cache_publish_drops_total", "counter", "Pages not stored in the shared cache (queue full, node down, no tenant key).", c.publish_drops},
      {"kvtier_shared_cache_published_bytes_total", "counter", "Page bytes stored in the shared cache.", c.published_bytes},
      {"kvtier_shared_cache_lookups_total", "counter", "LOOKUPs that asked the shared cache.", c.lookups},
      {"kvtier_shared_cache_lookup_keys_total", "counter", "Keys the shared cache was asked for.", c.lookup_keys},
      {"kvtier_shared_cache_lookup_hits_total", "counter", "Keys the shared cache held.", c.lookup_hits},
      {"kvtier_shared_cache_fetch_keys_total", "counter", "GET keys fetched from the shared cache.", c.fetch_keys},
      {"kvtier_shared_cache_fetch_hits_total", "counter", "Pages fetched from the shared cache and opened.", c.fetch_hits},
      {"kvtier_shared_cache_fetch_misses_total", "counter", "Fetched keys the shared cache did not hold.", c.fetch_misses},
      {"kvtier_shared_cache_fetched_bytes_total", "counter", "Page bytes fetched from the shared cache.", c.fetched_bytes},
      {"kvtier_shared_cache_io_errors_total", "counter", "Keys answered as misses because a node failed.", c.io_errors},
      {"kvtier_shared_cache_rejected_total", "counter", "Records not sealed by their tenant's key (forged, another tenant's).", c.rejected},
      {"kvtier_shared_cache_oversized_total", "counter", "Records larger than their page, refused unread.", c.oversized},
      {"kvtier_shared_cache_malformed_total", "counter", "Records of the wrong size or format.", c.malformed},
      {"kvtier_shared_cache_forgotten_total", "counter", "Records deleted from the shared cache by DELETE.", c.forgotten},
      {"kvtier_shared_cache_forget_errors_total", "counter", "Records DELETE could not delete (node down).", c.forget_errors},
      {"kvtier_shared_cache_node_down_events_total", "counter", "Times the cluster was found unreachable.", c.node_down_events},
      {"kvtier_shared_cache_down_nodes", "gauge", "Cluster nodes in backoff now.", c.down_nodes},
      {"kvtier_shared_cache_frontend_io_total", "counter", "Network batches on the frontend thread (a bug: always 0).", c.frontend_io},
  };
  RenderRows(rows, x);
}

// The prefetcher (lookahead and PREFETCH hints): daemon-wide, like STATS'
// prefetch block.
void RenderPrefetch(const prefetch::PrefetchCounters& c, Exposition& x) {
  const Row rows[] = {
      {"kvtier_prefetch_issued_total", "counter", "Promotions queued by lookahead and PREFETCH hints.", c.issued},
      {"kvtier_prefetch_merged_total", "counter", "Prefetch requests merged into a queued, running or leased promotion.", c.merged},
      {"kvtier_prefetch_in_time_total", "counter", "Promotions finished before the GET that read them.", c.completed_in_time},
      {"kvtier_prefetch_late_total", "counter", "Promotions a GET waited for, or finished past their deadline.", c.late},
      {"kvtier_prefetch_wasted_total", "counter", "Pages promoted, then evicted unread.", c.wasted},
      {"kvtier_prefetch_dropped_total", "counter", "Promotions past their deadline before they started.", c.dropped},
      {"kvtier_prefetch_rejected_total", "counter", "Prefetch requests refused: queue full.", c.rejected},
      {"kvtier_prefetch_failed_total", "counter", "Promotions that could not be done (no room, busy, missing, read error).", c.failed},
      {"kvtier_prefetch_lease_expired_total", "counter", "Leases that ended without a GET.", c.lease_expired},
      {"kvtier_prefetch_lease_refused_total", "counter", "Pages promoted but not leased: the tenant's lease share was full.", c.lease_refused + c.lookup_lease_refused},
      {"kvtier_prefetch_promoted_pages_total", "counter", "Pages the prefetcher moved up a tier.", c.promoted_pages},
      {"kvtier_prefetch_promoted_bytes_total", "counter", "Bytes the prefetcher moved up a tier.", c.promoted_bytes},
      {"kvtier_prefetch_queued", "gauge", "Promotions waiting to start.", c.queued},
      {"kvtier_prefetch_inflight", "gauge", "Promotions running.", c.inflight},
      {"kvtier_prefetch_leased_pages", "gauge", "Pages held by prefetch and LOOKUP leases.", c.leased_pages},
      {"kvtier_prefetch_pinned_bytes", "gauge", "Bytes prefetch holds pinned (leases and promotions in flight).", c.pinned_bytes},
  };
  RenderRows(rows, x);
}

}  // namespace

std::string EscapeLabel(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void ReadRss(uint64_t* rss, uint64_t* anon) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (parts.size() < 2) continue;
    uint64_t kb = 0;
    if (!absl::SimpleAtoi(parts[1], &kb)) continue;
    if (parts[0] == "VmRSS:") *rss = kb * 1024;
    if (parts[0] == "RssAnon:") *anon = kb * 1024;
  }
}

std::string RenderPrometheus(const tiers::StoreSnapshot& snap, const RequestMetrics& requests,
                             const ProcessFigures& process,
                             const std::optional<tiers::SharedCacheCounters>& shared,
                             const std::optional<prefetch::PrefetchCounters>& prefetch) {
  Exposition x;
  RenderDaemon(requests, process, x);
  RenderRequests(requests, x);
  RenderStore(snap, x);
  if (shared) RenderSharedCache(*shared, x);
  if (prefetch) RenderPrefetch(*prefetch, x);
  return x.Take();
}

void FillLatency(const RequestMetrics& requests, wire::StatsReply* out) {
  for (int t : SeenTypes(requests)) {
    const LatencyHistogram::Snapshot s = requests.histogram(t).Snap();
    wire::LatencyStats* l = out->add_latency();
    l->set_request(RequestMetrics::TypeName(t));
    l->set_count(s.count);
    l->set_errors(requests.errors(t));
    l->set_mean_us(s.MeanNs() / 1e3);
    l->set_p50_us(s.QuantileNs(0.50) / 1e3);
    l->set_p90_us(s.QuantileNs(0.90) / 1e3);
    l->set_p99_us(s.QuantileNs(0.99) / 1e3);
    l->set_max_us(double(s.max_ns) / 1e3);
  }
  const auto stages = requests.get_stages.Snap();
  for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
    const GetStages::Bucket& g = stages[b];
    if (g.count == 0) continue;
    wire::GetStageBucket* o = out->add_get_stages();
    o->set_le_us(b < LatencyHistogram::kFiniteBuckets ? LatencyHistogram::UpperBoundNs(b) / 1e3 : 0);
    o->set_count(g.count);
    auto mean_us = [&](int k) { return double(g.sum_ns[k]) / double(g.count) / 1e3; };
    o->set_prefetch_wait_us(mean_us(GetStages::kPrefetchWait));
    o->set_copy_queue_us(mean_us(GetStages::kCopyQueue));
    o->set_copy_us(mean_us(GetStages::kCopy));
  }
}

}  // namespace kvtier::daemon
