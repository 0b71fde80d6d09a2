// FormatCluster and ClusterJson. Differences to the baselines are in
// percentage points of the total hit rate, the unit the acceptance
// criteria of the shared cache use ("within 2 pp", ">= 15 pp above").
#include "tools/sim/cluster_report.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/sim/sim_report.h"

namespace kvtier::sim {
namespace {

constexpr const char* kHeader = "%-30s %7s %7s %7s %7s %7s %7s %8s %7s %8s %8s %8s %7s %8s\n";

std::string Pct(double rate) { return absl::StrFormat("%6.2f%%", 100 * rate); }

std::string Delta(const SimResult& r, const std::optional<SimResult>& base) {
  if (!base) return "-";
  return absl::StrFormat("%+7.2f", 100 * (r.hit_rate() - base->hit_rate()));
}

std::string TierPct(const SimResult& r, const char* tier) {
  for (const TierHits& t : r.tier_hits)
    if (t.tier == tier) return Pct(r.tier_rate(tier));
  return "-";
}

// One table line; `drops` is the cluster's own evictions (total lines only).
void AppendLine(std::string& out, const std::string& label, const SimResult& r,
                const std::optional<SimResult>& big, const std::optional<SimResult>& plain,
                std::optional<uint64_t> drops) {
  const bool remote = TierPct(r, "remote") != "-";
  auto count = [&](uint64_t v) { return remote ? absl::StrCat(v) : std::string("-"); };
  const RemoteCounters& c = r.remote;
  absl::StrAppendFormat(&out, kHeader, label, TierPct(r, "host"), TierPct(r, "nvme"),
                        TierPct(r, "remote"), Pct(r.hit_rate()), Delta(r, big), Delta(r, plain),
                        count(c.reads), count(c.read_misses), count(c.writes), count(c.exists),
                        count(c.adopted), count(c.deletes),
                        drops ? absl::StrCat(*drops) : std::string("-"));
}

void AppendNodes(std::string& out, const NodesResult& r) {
  if (r.nodes.size() < 2) return;
  for (size_t i = 0; i < r.nodes.size(); ++i)
    AppendLine(out, absl::StrCat("  node ", i), r.nodes[i], std::nullopt, std::nullopt,
               std::nullopt);
}

std::string NodesLabel(uint32_t nodes) {
  return absl::StrCat(nodes, nodes == 1 ? " node" : " nodes");
}

nlohmann::json NodesJson(const NodesResult& r, bool remote) {
  nlohmann::json j = {{"total", ResultJson(r.total)}, {"nodes", nlohmann::json::array()}};
  for (const SimResult& n : r.nodes) j["nodes"].push_back(ResultJson(n));
  if (remote) {
    const BackingCounters& b = r.backing;
    j["cluster"] = {{"sets", b.sets},
                    {"gets", b.gets},
                    {"get_misses", b.get_misses},
                    {"exists", b.exists},
                    {"deletes", b.deletes},
                    {"lru_drops", b.lru_drops},
                    {"records_at_end", r.backing_records}};
  }
  return j;
}

}  // namespace

std::string FormatCluster(const ClusterStudy& s) {
  std::string out = absl::StrFormat(
      "remote (shared cache): %s%s; each host %s (%d pages) + nvme %s (%d pages);\n  one "
      "shared cluster beside the stores, LRU over its capacity (its records belong to the "
      "cluster, not to a node)\n",
      NodesLabel(s.nodes),
      s.nodes > 1 ? absl::StrCat(", request i on node i % ", s.nodes) : std::string(), s.host_label,
      s.host_pages, s.nvme_label, s.nvme_pages);
  absl::StrAppendFormat(&out, kHeader, "setup", "host", "nvme", "remote", "total", "vs 1x", "vs 0r",
                        "GETs", "missed", "SETs", "EXISTS", "adopted", "DELs", "dropped");
  std::optional<SimResult> plain = s.no_remote.total;
  if (s.one_big) {
    AppendLine(out, absl::StrCat("1 node, ", s.big_label), *s.one_big, s.one_big, plain,
               std::nullopt);
  }
  AppendLine(out, absl::StrCat(NodesLabel(s.nodes), ", no remote"), s.no_remote.total, s.one_big,
             plain, std::nullopt);
  AppendNodes(out, s.no_remote);
  for (const RemoteRow& row : s.rows) {
    AppendLine(out,
               absl::StrCat(NodesLabel(s.nodes), " + ", row.label, " ",
                            RemoteAdmissionName(row.admission)),
               row.result.total, s.one_big, plain, row.result.backing.lru_drops);
    AppendNodes(out, row.result);
  }
  absl::StrAppend(
      &out,
      "  host/nvme/remote: hit pages by the tier LOOKUP named, of all page references; vs 1x: "
      "total minus one node\n  with every node's capacity; vs 0r: total minus the same nodes "
      "without the shared cache (pp).\n  GETs (missed: record gone since the LOOKUP): keys a "
      "GET fetched; SETs: pages published (leaving\n  a store's last tier, or PUT "
      "write-through); EXISTS: keys a LOOKUP miss checked; adopted: fetched pages\n  stored as "
      "PUTs; DELs: records a DELETE forgot; dropped: records the cluster's LRU evicted.\n");
  return out;
}

nlohmann::json ClusterJson(const ClusterStudy& s) {
  nlohmann::json j = {{"nodes", s.nodes},
                      {"host", s.host_label},
                      {"nvme", s.nvme_label},
                      {"host_pages", s.host_pages},
                      {"nvme_pages", s.nvme_pages},
                      {"no_remote", NodesJson(s.no_remote, false)},
                      {"remote", nlohmann::json::array()}};
  if (s.one_big) j["one_node"] = {{"capacity", s.big_label}, {"lru", ResultJson(*s.one_big)}};
  for (const RemoteRow& row : s.rows) {
    nlohmann::json r = NodesJson(row.result, true);
    r["capacity"] = row.label;
    r["cluster_pages"] = row.shared_pages;
    r["admission"] = std::string(RemoteAdmissionName(row.admission));
    j["remote"].push_back(std::move(r));
  }
  return j;
}

}  // namespace kvtier::sim
