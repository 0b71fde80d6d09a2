// Tables and JSON for kvtierctl: the STATS tables (tiers, tier traffic,
// namespaces, request latency) and protobuf-to-JSON conversion.
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "kvtierctl: %s\n", message.c_str());
  return code;
}

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? absl::StrFormat("%d B", b) : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string Percent(uint64_t hits, uint64_t misses) {
  if (hits + misses == 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * double(hits) / double(hits + misses));
}

std::string Micros(double us) {
  if (us < 1000) return absl::StrFormat("%.0fus", us);
  if (us < 1e6) return absl::StrFormat("%.2fms", us / 1e3);
  return absl::StrFormat("%.2fs", us / 1e6);
}

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

bool Is64BitInteger(const FieldDescriptor& f) {
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

// One value the JSON mapping wrote as a decimal string back to a number
// (nlohmann keeps int64/uint64 exact). A value that is not a decimal string
// is left as it is.
void NumberFromString(const FieldDescriptor& f, nlohmann::json& v) {
  if (!v.is_string()) return;
  const std::string& text = v.get_ref<const std::string&>();
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
    uint64_t u = 0;
    if (absl::SimpleAtoi(text, &u)) v = u;
  } else {
    int64_t i = 0;
    if (absl::SimpleAtoi(text, &i)) v = i;
  }
}

void Numbers64(const Descriptor& d, nlohmann::json& j);

// `v` is the JSON of field `f` (one element, or one map value: `f` is then
// the map's value field).
void Numbers64Value(const FieldDescriptor& f, nlohmann::json& v) {
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) Numbers64(*f.message_type(), v);
  else if (Is64BitInteger(f)) NumberFromString(f, v);
}

// Walks `j` with the message's descriptor: the field names tell which
// strings are 64-bit integers (a string-typed field holding digits, a
// namespace named "123", must stay a string).
void Numbers64(const Descriptor& d, nlohmann::json& j) {
  if (!j.is_object()) return;
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    auto it = j.find(f.name());
    if (it == j.end()) continue;
    if (f.is_map()) {
      const FieldDescriptor& value = *f.message_type()->map_value();
      if (it->is_object())
        for (auto& [key, v] : it->items()) Numbers64Value(value, v);
    } else if (f.is_repeated()) {
      if (it->is_array())
        for (auto& v : *it) Numbers64Value(f, v);
    } else {
      Numbers64Value(f, *it);
    }
  }
}

}  // namespace

nlohmann::json ToJson(const google::protobuf::Message& m) {
  std::string text;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &text, o);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // The protobuf JSON mapping writes 64-bit integers as strings (for
  // JavaScript's doubles), and JsonPrintOptions has no switch for it; counters
  // are numbers to jq and to scripts, so they are turned back into numbers.
  Numbers64(*m.GetDescriptor(), j);
  return j;
}

void PrintJson(const nlohmann::json& j) { std::printf("%s\n", j.dump(2).c_str()); }

void PrintLatencyTable(const wire::StatsReply& s) {
  if (s.latency().empty()) return;
  std::printf("\n%-18s %10s %8s %9s %9s %9s %9s %9s\n", "REQUEST", "COUNT", "ERRORS", "MEAN",
              "P50", "P90", "P99", "MAX");
  for (const auto& l : s.latency()) {
    std::printf("%-18s %10lu %8lu %9s %9s %9s %9s %9s\n", l.request().c_str(),
                (unsigned long)l.count(), (unsigned long)l.errors(), Micros(l.mean_us()).c_str(),
                Micros(l.p50_us()).c_str(), Micros(l.p90_us()).c_str(), Micros(l.p99_us()).c_str(),
                Micros(l.max_us()).c_str());
  }
}

// Prefetch counters are daemon-wide (admin sessions only).
void PrintPrefetch(const wire::StatsReply& s) {
  if (!s.has_prefetch()) return;
  const auto& p = s.prefetch();
  std::printf("\nprefetch: issued %lu, in time %lu, late %lu, wasted %lu, dropped %lu, "
              "demand waited %lu, taken by GETs %lu; promoted %lu pages (%s); queued %lu, in flight %lu, leased %lu; "
              "lookup leases %lu (cut by the share %lu); revoked %lu, past the lifetime bound %lu\n",
              (unsigned long)p.issued(), (unsigned long)p.completed_in_time(),
              (unsigned long)p.late(), (unsigned long)p.wasted(), (unsigned long)p.dropped(),
              (unsigned long)p.demand_waited(), (unsigned long)p.taken_by_get(),
              (unsigned long)p.promoted_pages(),
              Bytes(p.promoted_bytes()).c_str(), (unsigned long)p.queued(),
              (unsigned long)p.inflight(), (unsigned long)p.leased_pages(),
              (unsigned long)p.lookup_leased(), (unsigned long)p.lookup_lease_refused(),
              (unsigned long)p.lease_revoked(), (unsigned long)p.lease_bound_refused());
}

// The shared cache beside the store (admins only; absent without one).
void PrintSharedCache(const wire::StatsReply& s) {
  if (!s.has_shared_cache()) return;
  const auto& c = s.shared_cache();
  std::printf("\nshared cache: %s", c.backing().c_str());
  if (c.down_nodes() > 0)
    std::printf("  (%lu node(s) down: their pages miss, retrying with backoff)",
                (unsigned long)c.down_nodes());
  std::printf("\n");
  std::printf("  published %lu pages (%s; not stored %lu); lookups %lu asked %lu keys, %lu held; "
              "fetched %lu pages (%s; absent %lu)\n",
              (unsigned long)c.published(), Bytes(c.published_bytes()).c_str(),
              (unsigned long)c.publish_drops(), (unsigned long)c.lookups(),
              (unsigned long)c.lookup_keys(), (unsigned long)c.lookup_hits(),
              (unsigned long)c.fetch_hits(), Bytes(c.fetched_bytes()).c_str(),
              (unsigned long)c.fetch_misses());
  std::printf("  misses from node faults %lu (unreachable %lu times); refused records: not sealed "
              "by the tenant's key %lu, oversized %lu, malformed %lu; forgotten %lu (failed %lu)\n",
              (unsigned long)c.io_errors(), (unsigned long)c.node_down_events(),
              (unsigned long)c.rejected(), (unsigned long)c.oversized(),
              (unsigned long)c.malformed(), (unsigned long)c.forgotten(),
              (unsigned long)c.forget_errors());
}

void PrintStatsTables(const wire::StatsReply& s) {
  const auto& d = s.daemon();
  std::printf("kvtierd %s  up %.1f s  sessions %u  requests %lu (errors %lu)\n", d.version().c_str(),
              d.uptime_ms() / 1000.0, d.sessions(), (unsigned long)d.requests(),
              (unsigned long)d.request_errors());
  std::printf("memory: rss %s, of which outside the tier arenas %s; %lu pages indexed\n",
              Bytes(d.rss_bytes()).c_str(), Bytes(d.rss_anon_bytes()).c_str(),
              (unsigned long)d.index_pages());
  if (d.metrics_port() > 0)
    std::printf("metrics: http://127.0.0.1:%d/metrics\n", d.metrics_port());
  std::printf("\n%-6s %11s %11s %6s %9s %9s %9s %9s %11s %11s  %s\n", "TIER", "CAPACITY", "USED",
              "USE%", "PAGES", "HITS", "MISSES", "EVICTED", "BYTES IN", "BYTES OUT", "BACKING");
  for (const auto& t : s.tiers()) {
    double pct = t.capacity_bytes() ? 100.0 * double(t.used_bytes()) / double(t.capacity_bytes()) : 0;
    std::printf("%-6s %11s %11s %5.1f%% %9lu %9lu %9lu %9lu %11s %11s  %s\n", t.name().c_str(),
                Bytes(t.capacity_bytes()).c_str(), Bytes(t.used_bytes()).c_str(), pct,
                (unsigned long)t.pages(), (unsigned long)t.hits(), (unsigned long)t.misses(),
                (unsigned long)t.evictions(), Bytes(t.bytes_in()).c_str(),
                Bytes(t.bytes_out()).c_str(), t.backing().c_str());
  }
  std::printf("\n%-6s %10s %10s %9s %9s %9s %9s %9s %9s %9s %9s\n", "TIER", "DEMOTED", "PROMOTED",
              "DROPPED", "CKSUM-ERR", "IO-QUEUE", "IO-ERR", "RECOVERED", "BAD-REC", "CLEAN",
              "CLEANED");
  for (const auto& t : s.tiers()) {
    std::printf("%-6s %10lu %10lu %9lu %9lu %9lu %9lu %9lu %9lu %9lu %9lu\n", t.name().c_str(),
                (unsigned long)t.demotions(), (unsigned long)t.promotions(),
                (unsigned long)t.dropped(), (unsigned long)t.checksum_errors(),
                (unsigned long)t.io_inflight(), (unsigned long)t.io_errors(),
                (unsigned long)t.recovered_pages(), (unsigned long)t.dropped_records(),
                (unsigned long)t.clean_pages(), (unsigned long)t.cleaned());
    if (!t.eviction().empty() && t.eviction() != "lru")
      std::printf("%-6s eviction %s: %lu pages protected (read or PUT again), %lu evictions "
                  "remembered\n",
                  t.name().c_str(), t.eviction().c_str(), (unsigned long)t.protected_pages(),
                  (unsigned long)t.ghost_entries());
    if (t.durability_failures() > 0 || t.frontend_io() > 0)
      std::printf("%-6s durability failures %lu, frontend I/O %lu\n", t.name().c_str(),
                  (unsigned long)t.durability_failures(), (unsigned long)t.frontend_io());
    if (t.io_classes_size() > 0) {
      std::printf("%-6s device I/O by class:", t.name().c_str());
      for (const auto& k : t.io_classes()) {
        const double mean = k.ios() ? double(k.latency_us()) / double(k.ios()) : 0;
        std::printf("  %s %lu (mean %.0f us)", k.name().c_str(), (unsigned long)k.ios(), mean);
      }
      std::printf("\n");
    }
  }
  std::printf("\n%-16s %9s %11s %9s %9s %9s %9s %9s\n", "NAMESPACE", "PAGES", "BYTES",
              "LOOKUP-HIT", "GET-HIT", "PUTS", "DEDUP", "QUOTA-EV");
  for (const auto& n : s.namespaces()) {
    std::printf("%-16s %9lu %11s %10s %9s %9lu %9lu %9lu\n", n.name().c_str(),
                (unsigned long)n.pages(), Bytes(n.bytes()).c_str(),
                Percent(n.lookup_hits(), n.lookup_misses()).c_str(),
                Percent(n.get_hits(), n.get_misses()).c_str(), (unsigned long)n.puts(),
                (unsigned long)n.dedup_puts(), (unsigned long)n.quota_evictions());
  }
  PrintPrefetch(s);
  PrintSharedCache(s);
  PrintLatencyTable(s);
}

}  // namespace kvtier::ctl
