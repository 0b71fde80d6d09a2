// Counter, daemon-tier and time-series sections of the kvtier-stress report.
#include "tools/stress/report_parts.h"

#include <map>

#include "absl/strings/str_format.h"

namespace kvtier::stress {
namespace {

using nlohmann::json;

uint64_t Ld(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }
double Ratio(uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / b : 0.0; }

json TierJson(const wire::TierStats& a, const wire::TierStats& b) {
  json t = {{"name", a.name()},
            {"capacity_bytes", a.capacity_bytes()},
            {"used_bytes", a.used_bytes()},
            {"pages", a.pages()},
            {"bytes_in", a.bytes_in() - b.bytes_in()},
            {"bytes_out", a.bytes_out() - b.bytes_out()},
            {"hits", a.hits() - b.hits()},
            {"misses", a.misses() - b.misses()},
            {"evictions", a.evictions() - b.evictions()},
            {"demotions", a.demotions() - b.demotions()},
            {"promotions", a.promotions() - b.promotions()},
            {"dropped", a.dropped() - b.dropped()},
            {"checksum_errors", a.checksum_errors() - b.checksum_errors()},
            {"io_errors", a.io_errors() - b.io_errors()}};
  return t;
}

// The shared cache's counters over the run, as one more row named "shared".
json SharedCacheJson(const wire::SharedCacheStats& a, const wire::SharedCacheStats& b) {
  return json{{"name", "shared"},
              {"published", a.published() - b.published()},
              {"publish_drops", a.publish_drops() - b.publish_drops()},
              {"lookup_hits", a.lookup_hits() - b.lookup_hits()},
              {"fetch_hits", a.fetch_hits() - b.fetch_hits()},
              {"fetch_misses", a.fetch_misses() - b.fetch_misses()},
              {"io_errors", a.io_errors() - b.io_errors()},
              {"rejected", a.rejected() - b.rejected()},
              {"oversized", a.oversized() - b.oversized()},
              {"malformed", a.malformed() - b.malformed()},
              {"forgotten", a.forgotten() - b.forgotten()},
              {"node_down_events", a.node_down_events() - b.node_down_events()}};
}

}  // namespace

json CountersJson(const Counters& c, uint64_t page_bytes) {
  json hit_pages = json::object(), rate = json::object(), bytes = json::object();
  for (size_t i = 1; i < kTiers; ++i) {
    hit_pages[kTierNames[i]] = Ld(c.hit_pages_by_tier[i]);
    rate[kTierNames[i]] = Ratio(Ld(c.hit_pages_by_tier[i]), Ld(c.pages));
    bytes[kTierNames[i]] = Ld(c.get_bytes_by_tier[i]);
  }
  const uint64_t get_bytes = c.GetBytes();
  return {
      {"requests", Ld(c.requests)},
      {"failed_requests", Ld(c.errors)},
      {"corrupt_pages", Ld(c.corrupt_pages)},
      {"pages",
       {{"looked_up", Ld(c.pages)},
        {"hits", Ld(c.hit_pages)},
        {"misses", Ld(c.pages) - Ld(c.hit_pages)},
        {"put_stored", Ld(c.put_stored)}}},
      {"hit_rate", {{"overall", Ratio(Ld(c.hit_pages), Ld(c.pages))}, {"by_tier", rate}}},
      {"hit_pages_by_tier", hit_pages},
      {"get_bytes_by_tier", bytes},
      {"get_bytes", get_bytes},
      {"remote_get_share", Ratio(Ld(c.get_bytes_by_tier[TierIndex(TierKind::kRemote)]), get_bytes)},
      {"remote_hit_share",
       Ratio(Ld(c.hit_pages_by_tier[TierIndex(TierKind::kRemote)]), Ld(c.hit_pages))},
      {"remote_hits_other_endpoint", Ld(c.remote_hits_other_endpoint)},
      {"page_bytes", page_bytes}};
}

json DaemonTiersJson(const std::optional<wire::StatsReply>& before,
                     const std::optional<wire::StatsReply>& after) {
  json out = json::array();
  if (!before || !after) return out;
  for (const wire::TierStats& a : after->tiers()) {
    wire::TierStats b;
    for (const wire::TierStats& x : before->tiers())
      if (x.name() == a.name()) b = x;
    out.push_back(TierJson(a, b));
  }
  if (after->has_shared_cache()) out.push_back(SharedCacheJson(after->shared_cache(), before->shared_cache()));
  return out;
}

json SumDaemonTiers(const std::vector<json>& per_daemon) {
  std::vector<std::string> order;
  std::map<std::string, json> sum;
  for (const json& tiers : per_daemon)
    for (const json& t : tiers) {
      const std::string name = t["name"];
      auto [it, fresh] = sum.try_emplace(name, t);
      if (fresh) {
        order.push_back(name);
        continue;
      }
      for (auto& [k, v] : it->second.items())
        if (v.is_number_unsigned())
          v = v.get<uint64_t>() + t[k].get<uint64_t>();
    }
  json out = json::array();
  for (const std::string& name : order) out.push_back(sum[name]);
  return out;
}

json SeriesJson(const std::vector<Sample>& samples, uint64_t interval_ms, double start_unix_s) {
  json points = json::array();
  for (const SeriesPoint& p : ToSeries(samples))
    points.push_back({{"t_s", p.t_s},
                      {"requests", p.requests},
                      {"failed", p.failed},
                      {"corrupt_pages", p.corrupt_pages},
                      {"interval_requests", p.interval_requests},
                      {"interval_failed", p.interval_failed},
                      {"pages", p.pages},
                      {"hit_pages", p.hit_pages},
                      {"hit_rate", p.has_rate() ? json(p.hit_rate()) : json(nullptr)}});
  return {{"interval_ms", interval_ms}, {"start_unix_s", start_unix_s}, {"points", points}};
}

std::string SeriesCsv(const std::vector<Sample>& samples) {
  std::string text =
      "t_s,requests,failed,corrupt_pages,interval_requests,"
      "interval_failed,pages,hit_pages,"
      "hit_rate\n";
  for (const SeriesPoint& p : ToSeries(samples)) {
    absl::StrAppendFormat(&text, "%.3f,%d,%d,%d,%d,%d,%d,%d,", p.t_s, p.requests, p.failed,
                          p.corrupt_pages, p.interval_requests, p.interval_failed, p.pages,
                          p.hit_pages);
    if (p.has_rate()) absl::StrAppendFormat(&text, "%.6f", p.hit_rate());
    text += "\n";
  }
  return text;
}

}  // namespace kvtier::stress
