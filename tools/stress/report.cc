// Builds the kvtier-stress report (JSON) and prints it as text.
#include "tools/stress/report.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/stress/report_parts.h"

namespace kvtier::stress {
namespace {

using nlohmann::json;

uint64_t Ld(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }
double Ratio(uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / b : 0.0; }

json QuantilesJson(std::vector<double>& v) {
  const Quantiles q = ComputeQuantiles(v);
  return {{"count", q.count}, {"p50", q.p50}, {"p90", q.p90}, {"p99", q.p99}, {"max", q.max}};
}

json TraceJson(const trace::Trace& t) {
  const trace::TraceSummary s = trace::Summarize(t);
  return {{"source", t.source}, {"prefix_model", t.prefix_model},
          {"block_tokens", t.block_tokens}, {"requests", s.requests},
          {"block_refs", s.block_refs}, {"unique_blocks", s.unique_blocks},
          {"infinite_cache_hit_rate", s.infinite_cache_hit_rate},
          {"skipped_lines", t.skipped}};
}

// One entry per endpoint: its share of the counters and its daemon's tiers.
json EndpointsJson(const StressOptions& o, const Replayer& replayer, const ReplayResult& res) {
  json out = json::array();
  for (size_t e = 0; e < o.endpoints.size(); ++e) {
    json j = CountersJson(replayer.endpoint_counters(e), replayer.page_bytes());
    j["endpoint"] = o.endpoints[e].empty() ? "(default)" : o.endpoints[e];
    j["daemon_tiers"] = e < res.before.size() && e < res.after.size()
                            ? DaemonTiersJson(res.before[e], res.after[e])
                            : json::array();
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

json BuildReport(const StressOptions& o, const trace::Trace& t, const Replayer& replayer,
                 ReplayResult& res) {
  const Counters& c = replayer.counters();
  const uint64_t pb = replayer.page_bytes();
  const json totals = CountersJson(c, pb);
  const uint64_t get_bytes = c.GetBytes(), put_bytes = Ld(c.put_stored) * pb;
  const uint64_t requests = Ld(c.requests);
  json j;
  j["tool"] = "kvtier-stress";
  j["trace"] = TraceJson(t);
  j["mapping"] = {{"page_mapping", replayer.mapping().Describe(t.block_tokens)},
                  {"pages_per_block", o.pages_per_block}, {"page_key", kKeyRule},
                  {"key_salt", absl::StrFormat("%016x", TraceSalt(t))},
                  {"page_bytes_rule", kPatternRule},
                  {"layout", replayer.layout().DebugString()}, {"page_bytes", pb}};
  j["endpoints"] = EndpointsJson(o, replayer, res);
  std::vector<std::string> names;
  for (const json& e : j["endpoints"]) names.push_back(e["endpoint"].get<std::string>());
  j["run"] = {{"endpoint", absl::StrJoin(names, ",")}, {"endpoints", names.size()},
              {"tenant", o.tenant}, {"concurrency", o.concurrency},
              {"time_scale", o.time_scale}, {"batch_pages", o.batch_pages}, {"prefetch_ahead", o.prefetch_ahead},
              {"decode", o.decode}, {"stopped_early", res.stopped_early}};
  j["requests"] = requests;
  j["wall_s"] = res.wall_s;
  j["requests_per_s"] = res.wall_s > 0 ? requests / res.wall_s : 0;
  j["gb_per_s"] = res.wall_s > 0 ? (get_bytes + put_bytes) / res.wall_s / 1e9 : 0;
  j["pages"] = {{"looked_up", Ld(c.pages)}, {"hits", Ld(c.hit_pages)},
                {"misses", Ld(c.pages) - Ld(c.hit_pages)}, {"get_races", Ld(c.get_races)},
                {"put_stored", Ld(c.put_stored)}, {"put_deduplicated", Ld(c.put_dedup)},
                {"put_not_stored", Ld(c.put_not_stored)}, {"decode_pages", Ld(c.decode_pages)}};
  j["hit_rate"] = {{"overall", Ratio(Ld(c.hit_pages), Ld(c.pages))},
                   {"by_tier", totals["hit_rate"]["by_tier"]},
                   {"blocks", Ratio(Ld(c.hit_blocks), Ld(c.blocks))}};
  j["hit_pages_by_tier"] = totals["hit_pages_by_tier"];
  j["bytes"] = {{"get_by_tier", totals["get_bytes_by_tier"]}, {"get", get_bytes},
                {"put", put_bytes}, {"total", get_bytes + put_bytes}};
  j["remote_get_share"] = totals["remote_get_share"];
  j["remote_hit_share"] = totals["remote_hit_share"];
  j["remote_hits_other_endpoint"] = totals["remote_hits_other_endpoint"];
  std::vector<json> per_daemon;
  for (const json& e : j["endpoints"]) per_daemon.push_back(e["daemon_tiers"]);
  j["daemon_tiers"] = SumDaemonTiers(per_daemon);
  j["latency_us"] = {{"lookup", QuantilesJson(res.latencies.lookup_us)},
                     {"get", QuantilesJson(res.latencies.get_us)},
                     {"put", QuantilesJson(res.latencies.put_us)}};
  j["series"] = SeriesJson(res.samples, res.series_interval_ms, res.series_start_unix_s);
  j["errors"] = Ld(c.errors);
  j["failed_requests"] = Ld(c.errors);
  j["corrupt_pages"] = Ld(c.corrupt_pages);
  j["error_samples"] = res.error_samples;
  j["ok"] = Ld(c.errors) == 0 && Ld(c.corrupt_pages) == 0 && !res.stopped_early;
  return j;
}

namespace {

std::string Pct(double x) { return absl::StrFormat("%.2f%%", 100 * x); }
std::string Gb(uint64_t b) { return absl::StrFormat("%.2f GB", b / 1e9); }

// What was replayed, how, and against what.
std::string FormatSetup(const json& j) {
  const json& tr = j["trace"];
  std::string s = "kvtier-stress report\n";
  absl::StrAppendFormat(&s, "  trace          %s (%d requests, %d block refs, %d unique)\n",
                        tr["source"].get<std::string>(), tr["requests"].get<uint64_t>(),
                        tr["block_refs"].get<uint64_t>(), tr["unique_blocks"].get<uint64_t>());
  absl::StrAppend(&s, "  prefix model   ", tr["prefix_model"].get<std::string>(), "\n");
  if (!tr["skipped_lines"].empty())
    absl::StrAppend(&s, "  skipped lines  ", tr["skipped_lines"].size(), " (first: ",
                    tr["skipped_lines"][0].get<std::string>(), ")\n");
  const json& m = j["mapping"];
  absl::StrAppend(&s, "  page mapping   ", m["page_mapping"].get<std::string>(), "\n",
                  "  page keys      ", m["page_key"].get<std::string>(), " (salt ",
                  m["key_salt"].get<std::string>(), ")\n",
                  "  page bytes     ", m["page_bytes_rule"].get<std::string>(), "\n",
                  "  layout         ", m["layout"].get<std::string>(), " = ",
                  m["page_bytes"].get<uint64_t>(), " bytes/page\n");
  const json& run = j["run"];
  absl::StrAppendFormat(&s, "  daemon         %s, tenant %s, %d session(s), time_scale %g%s\n",
                        run["endpoint"].get<std::string>(), run["tenant"].get<std::string>(),
                        run["concurrency"].get<int>(), run["time_scale"].get<double>(),
                        run["stopped_early"].get<bool>() ? ", STOPPED EARLY" : "");
  return s;
}

// Hit rates, pages and bytes.
std::string FormatTraffic(const json& j) {
  std::string s;
  absl::StrAppendFormat(&s, "  requests       %d in %.2f s = %.1f req/s\n",
                        j["requests"].get<uint64_t>(), j["wall_s"].get<double>(),
                        j["requests_per_s"].get<double>());
  const json& p = j["pages"];
  const json& hr = j["hit_rate"];
  absl::StrAppendFormat(&s,
                        "  hit rate       %s of %d pages (blocks %s): hbm %s, host %s, "
                        "nvme %s, remote %s\n",
                        Pct(hr["overall"]), p["looked_up"].get<uint64_t>(), Pct(hr["blocks"]),
                        Pct(hr["by_tier"]["hbm"]), Pct(hr["by_tier"]["host"]),
                        Pct(hr["by_tier"]["nvme"]), Pct(hr["by_tier"]["remote"]));
  absl::StrAppendFormat(&s, "  bound          infinite cache %s\n",
                        Pct(j["trace"]["infinite_cache_hit_rate"]));
  absl::StrAppendFormat(&s,
                        "  PUT pages      %d stored, %d deduplicated, %d not stored, %d decode; "
                        "%d LOOKUP hits gone by the GET\n",
                        p["put_stored"].get<uint64_t>(), p["put_deduplicated"].get<uint64_t>(),
                        p["put_not_stored"].get<uint64_t>(), p["decode_pages"].get<uint64_t>(),
                        p["get_races"].get<uint64_t>());
  const json& b = j["bytes"];
  absl::StrAppendFormat(&s,
                        "  bytes          GET %s (hbm %s, host %s, nvme %s, remote %s), PUT %s; "
                        "%.2f GB/s\n",
                        Gb(b["get"]), Gb(b["get_by_tier"]["hbm"]), Gb(b["get_by_tier"]["host"]),
                        Gb(b["get_by_tier"]["nvme"]), Gb(b["get_by_tier"]["remote"]), Gb(b["put"]),
                        j["gb_per_s"].get<double>());
  return s;
}

// The daemons' own tier counters over the run (summed over endpoints).
std::string FormatDaemonTiers(const json& j) {
  std::string s;
  for (const json& t : j["daemon_tiers"]) {
    if (t["name"] == "shared") {
      absl::StrAppendFormat(
          &s,
          "  shared cache    published %d (not %d), lookup hits %d, fetched %d (absent %d), "
          "node errors %d, rejected %d, oversized %d, malformed %d, forgotten %d\n",
          t["published"].get<uint64_t>(), t["publish_drops"].get<uint64_t>(),
          t["lookup_hits"].get<uint64_t>(), t["fetch_hits"].get<uint64_t>(),
          t["fetch_misses"].get<uint64_t>(), t["io_errors"].get<uint64_t>(),
          t["rejected"].get<uint64_t>(), t["oversized"].get<uint64_t>(),
          t["malformed"].get<uint64_t>(), t["forgotten"].get<uint64_t>());
      continue;
    }
    absl::StrAppendFormat(&s,
                          "  daemon %-7s  in %s, out %s, evictions %d, demotions %d, "
                          "promotions %d, dropped %d, checksum errors %d",
                          t["name"].get<std::string>(), Gb(t["bytes_in"]), Gb(t["bytes_out"]),
                          t["evictions"].get<uint64_t>(), t["demotions"].get<uint64_t>(),
                          t["promotions"].get<uint64_t>(), t["dropped"].get<uint64_t>(),
                          t["checksum_errors"].get<uint64_t>());
    s += "\n";
  }
  return s;
}

// One line per endpoint (only when there are several), and the series.
std::string FormatEndpoints(const json& j) {
  std::string s;
  if (j["endpoints"].size() > 1)
    for (const json& e : j["endpoints"]) {
      const json& hr = e["hit_rate"];
      absl::StrAppendFormat(
          &s,
          "  endpoint       %s: %d requests, %d failed, %d corrupt; hit %s "
          "(host %s, nvme %s, remote %s); %d remote hits PUT via another "
          "endpoint\n",
          e["endpoint"].get<std::string>(), e["requests"].get<uint64_t>(),
          e["failed_requests"].get<uint64_t>(), e["corrupt_pages"].get<uint64_t>(),
          Pct(hr["overall"]), Pct(hr["by_tier"]["host"]), Pct(hr["by_tier"]["nvme"]),
          Pct(hr["by_tier"]["remote"]), e["remote_hits_other_endpoint"].get<uint64_t>());
    }
  const json& series = j["series"];
  absl::StrAppendFormat(&s, "  series         %d points, one per %d ms (hit rate per interval)\n",
                        series["points"].size(), series["interval_ms"].get<uint64_t>());
  return s;
}

}  // namespace

std::string FormatReport(const json& j) {
  std::string s = FormatSetup(j) + FormatTraffic(j) + FormatDaemonTiers(j) + FormatEndpoints(j);
  for (const char* op : {"lookup", "get", "put"}) {
    const json& q = j["latency_us"][op];
    absl::StrAppendFormat(&s, "  %-6s latency  p50 %.0f us, p90 %.0f, p99 %.0f, max %.0f (%d calls)\n",
                          op, q["p50"].get<double>(), q["p90"].get<double>(),
                          q["p99"].get<double>(), q["max"].get<double>(),
                          q["count"].get<uint64_t>());
  }
  absl::StrAppendFormat(&s, "  failed reqs    %d\n  corrupt pages  %d\n",
                        j["errors"].get<uint64_t>(), j["corrupt_pages"].get<uint64_t>());
  for (const json& e : j["error_samples"]) absl::StrAppend(&s, "    ", e.get<std::string>(), "\n");
  absl::StrAppend(&s, "  verdict        ", j["ok"].get<bool>() ? "OK" : "FAILED", "\n");
  return s;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write '", path, "': ",
                                                           std::strerror(errno)));
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("writing '", path, "' failed"));
  return absl::OkStatus();
}

absl::Status WriteSeriesCsv(const std::string& path, const std::vector<Sample>& samples) {
  return WriteFile(path, SeriesCsv(samples));
}

absl::Status WriteCsv(const std::string& path, const std::vector<Sample>& samples) {
  std::string text =
      "elapsed_s,requests,pages,hit_pages,hit_rate,get_bytes,put_bytes,errors,corrupt_pages\n";
  for (const Sample& x : samples)
    absl::StrAppendFormat(&text, "%.3f,%d,%d,%d,%.6f,%d,%d,%d,%d\n", x.elapsed_s, x.requests,
                          x.pages, x.hit_pages, Ratio(x.hit_pages, x.pages), x.get_bytes,
                          x.put_bytes, x.errors, x.corrupt_pages);
  return WriteFile(path, text);
}

}  // namespace kvtier::stress
