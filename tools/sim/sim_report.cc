// Table, JSON and plot for kvtier-sim. The plot is drawn by gnuplot: a
// Debian package (gnuplot-nox) driven by a short generated script is less to
// install and keep working than a Python plotting stack, and its pngcairo
// terminal renders the same picture headless.
#include "tools/sim/sim_report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tools/sim/cluster_report.h"

namespace kvtier::sim {
namespace {

std::string Pct(double rate) { return absl::StrFormat("%6.2f%%", 100 * rate); }

// The share of the LRU -> Belady gap a policy closes ("" when there is no
// gap worth the name: under 0.1 pp).
std::string GapClosed(const SimResult& p, const SimResult& lru, const SimResult& belady) {
  const double gap = belady.hit_rate() - lru.hit_rate();
  if (gap < 0.001) return "";
  return absl::StrFormat("%+.0f%%", 100 * (p.hit_rate() - lru.hit_rate()) / gap);
}

// A gnuplot single-quoted string: a quote inside is written twice.
std::string GpQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

nlohmann::json ResultJson(const SimResult& r) {
  nlohmann::json j = {{"policy", r.policy},     {"capacity_pages", r.capacity_pages},
                      {"requests", r.requests}, {"refs", r.refs},
                      {"hits", r.hits},         {"hit_rate", r.hit_rate()},
                      {"seconds", r.seconds}};
  if (r.is_store()) {
    for (const TierHits& t : r.tier_hits) {
      j["tier_hits"][t.tier] = t.hits;
      j["tier_hit_rate"][t.tier] = r.tier_rate(t.tier);
    }
    j["evictions"] = r.evictions;
    j["demotions"] = r.demotions;
    j["promotions"] = r.promotions;
    j["dropped"] = r.dropped;
    j["not_stored"] = r.not_stored;
    if (j["tier_hits"].contains("remote")) {
      const RemoteCounters& c = r.remote;
      j["remote"] = {{"reads", c.reads},       {"read_misses", c.read_misses},
                     {"writes", c.writes},     {"write_through", c.write_through},
                     {"exists", c.exists},     {"adopted", c.adopted},
                     {"deletes", c.deletes}};
    }
  }
  return j;
}

std::string FormatReport(const SimReport& rep) {
  std::string out = absl::StrFormat(
      "kvtier-sim: %s\n  %d requests, %d page references, %d unique pages, %d decode pages\n"
      "  prefix sharing: %s\n  mapping: %s\n  LRU policy: %s\n",
      rep.trace, rep.requests, rep.refs, rep.unique_pages, rep.decode_pages, rep.prefix_model,
      rep.mapping, rep.policy);
  if (!rep.rows.empty()) {
    absl::StrAppendFormat(&out, "\n%-12s %10s %14s", "capacity", "pages", "LRU (tiers/)");
    for (const SimResult& o : rep.rows[0].others) {
      absl::StrAppendFormat(&out, " %9s %8s", o.policy, "of gap");
    }
    absl::StrAppendFormat(&out, " %10s %10s\n", "Belady", "infinite");
    for (const CapacityRow& row : rep.rows) {
      absl::StrAppendFormat(&out, "%-12s %10d %14s", row.label, row.capacity_pages,
                            Pct(row.lru.hit_rate()));
      for (const SimResult& o : row.others) {
        absl::StrAppendFormat(&out, " %9s %8s", Pct(o.hit_rate()),
                              GapClosed(o, row.lru, row.belady));
      }
      absl::StrAppendFormat(&out, " %10s %10s\n", Pct(row.belady.hit_rate()),
                            Pct(rep.infinite.hit_rate()));
    }
  }
  if (rep.two_tier.has_value()) {
    const TwoTierRun& tt = *rep.two_tier;
    absl::StrAppendFormat(
        &out,
        "\ntwo tiers: host %s (%d pages) + nvme %s (%d pages)\n"
        "  LRU (tiers/): host %s  nvme %s  total %s  (%d demotions, %d promotions, %d dropped)\n"
        "  Belady over %d pages: %s   infinite: %s\n",
        tt.host_label, tt.host_pages, tt.nvme_label, tt.nvme_pages, Pct(tt.lru.tier_rate("host")),
        Pct(tt.lru.tier_rate("nvme")), Pct(tt.lru.hit_rate()), tt.lru.demotions, tt.lru.promotions,
        tt.lru.dropped, tt.host_pages + tt.nvme_pages, Pct(tt.belady.hit_rate()),
        Pct(rep.infinite.hit_rate()));
    for (const SimResult& o : tt.others) {
      absl::StrAppendFormat(
          &out, "  %s: host %s  nvme %s  total %s  (%d demotions, %d promotions, %d dropped)\n",
          o.policy, Pct(o.tier_rate("host")), Pct(o.tier_rate("nvme")), Pct(o.hit_rate()),
          o.demotions, o.promotions, o.dropped);
    }
  }
  if (rep.cluster.has_value()) absl::StrAppend(&out, "\n", FormatCluster(*rep.cluster));
  absl::StrAppendFormat(&out, "\nwall time %.2f s\n", rep.wall_seconds);
  return out;
}

nlohmann::json ReportJson(const SimReport& rep) {
  nlohmann::json j = {{"trace", rep.trace},
                      {"prefix_model", rep.prefix_model},
                      {"mapping", rep.mapping},
                      {"policy", rep.policy},
                      {"requests", rep.requests},
                      {"refs", rep.refs},
                      {"unique_pages", rep.unique_pages},
                      {"decode_pages", rep.decode_pages},
                      {"infinite", ResultJson(rep.infinite)},
                      {"wall_seconds", rep.wall_seconds}};
  j["capacities"] = nlohmann::json::array();
  for (const CapacityRow& row : rep.rows) {
    nlohmann::json c = {{"label", row.label},
                        {"capacity_pages", row.capacity_pages},
                        {"lru", ResultJson(row.lru)},
                        {"belady", ResultJson(row.belady)}};
    for (const SimResult& o : row.others) c["policies"][o.policy] = ResultJson(o);
    j["capacities"].push_back(std::move(c));
  }
  if (rep.two_tier.has_value()) {
    const TwoTierRun& tt = *rep.two_tier;
    j["two_tier"] = {{"host", tt.host_label},       {"nvme", tt.nvme_label},
                     {"host_pages", tt.host_pages}, {"nvme_pages", tt.nvme_pages},
                     {"lru", ResultJson(tt.lru)},   {"belady", ResultJson(tt.belady)}};
    for (const SimResult& o : tt.others) j["two_tier"]["policies"][o.policy] = ResultJson(o);
  }
  if (rep.cluster.has_value()) j["cluster"] = ClusterJson(*rep.cluster);
  return j;
}

absl::Status WriteJson(const SimReport& report, const std::string& path) {
  std::ofstream f(path);
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write JSON to ", path));
  f << ReportJson(report).dump(2) << "\n";
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

std::string PlotScript(const SimReport& rep, const std::string& png_path) {
  // Ticks at the capacities asked for, labelled as given ("4k", "4GiB").
  std::string tics;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const CapacityRow& row : rep.rows) {
    absl::StrAppend(&tics, tics.empty() ? "" : ", ", GpQuote(row.label), " ", row.capacity_pages);
    lo = std::min(lo, row.capacity_pages);
    hi = std::max(hi, row.capacity_pages);
  }
  std::string s = absl::StrCat(
      "set terminal pngcairo size 960,600 font ',11'\n", "set output ", GpQuote(png_path), "\n",
      "set title ", GpQuote(absl::StrCat("kvtier-sim: ", rep.trace)), " noenhanced\n",
      "set xlabel 'cache capacity (pages)'\nset ylabel 'prefix hit rate (%)'\n",
      "set logscale x 2\nset yrange [0:100]\nset grid\nset key top left noenhanced\n",
      absl::StrFormat("set xrange [%.1f:%.1f]\n", lo / 1.3, hi * 1.3), "set xtics (", tics, ")\n",
      "$data << EOD\n");
  for (const CapacityRow& row : rep.rows) {
    absl::StrAppendFormat(&s, "%d %.4f %.4f %.4f", row.capacity_pages, 100 * row.lru.hit_rate(),
                          100 * row.belady.hit_rate(), 100 * rep.infinite.hit_rate());
    for (const SimResult& o : row.others) absl::StrAppendFormat(&s, " %.4f", 100 * o.hit_rate());
    absl::StrAppend(&s, "\n");
  }
  absl::StrAppend(
      &s, "EOD\n",
      "plot $data using 1:2 with linespoints lw 2 pt 7 title 'LRU (tiers/ TierManager)', \\\n"
      "     $data using 1:3 with linespoints lw 2 pt 5 title 'Belady (offline optimum)', \\\n"
      "     $data using 1:4 with lines lw 2 dt 2 title 'infinite cache'");
  for (size_t i = 0; !rep.rows.empty() && i < rep.rows[0].others.size(); ++i) {
    absl::StrAppendFormat(&s, ", \\\n     $data using 1:%d with linespoints lw 2 pt %d title %s",
                          5 + i, 9 + 2 * i,
                          GpQuote(absl::StrCat(rep.rows[0].others[i].policy, " (tiers/)")));
  }
  absl::StrAppend(&s, "\n");
  return s;
}

absl::Status WritePlot(const SimReport& report, const std::string& png_path) {
  if (report.rows.empty()) {
    return absl::FailedPreconditionError("--plot needs --capacities (nothing to plot)");
  }
  const std::string gnuplot = FindOnPath("gnuplot");
  if (gnuplot.empty()) {
    return absl::FailedPreconditionError(
        "gnuplot not found on PATH: install it (apt-get install gnuplot-nox; scripts/setup.sh "
        "lists it) to get the plot; the table above is complete without it");
  }
  unlink(png_path.c_str());  // a stale picture must not pass for a new one
  FILE* pipe = popen(absl::StrCat("'", gnuplot, "'").c_str(), "w");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("cannot start ", gnuplot));
  const std::string script = PlotScript(report, png_path);
  const size_t written = std::fwrite(script.data(), 1, script.size(), pipe);
  const int status = pclose(pipe);
  struct stat st;
  if (written != script.size() || status != 0 || stat(png_path.c_str(), &st) != 0 ||
      st.st_size == 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed to write ", png_path, " (exit status ",
                                            status, "; its messages are above)"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::sim
