// kvtierctl: shows the state of a running kvtierd. `kvtierctl stats` prints
// per-tier and per-namespace tables; `--json` prints the same as JSON.
// Exits 1 with a one-line error when no daemon answers.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "kvtier.pb.h"
#include "kvtier/client.h"

ABSL_FLAG(std::string, endpoint, "", "daemon endpoint (default: the default ipc socket, or $KVTIER_ENDPOINT)");
ABSL_FLAG(std::string, tenant, "default", "tenant to authenticate as");
ABSL_FLAG(std::string, token, "", "tenant token (or $KVTIER_TOKEN)");
ABSL_FLAG(bool, json, false, "print JSON instead of tables");
ABSL_FLAG(int, timeout_ms, 2000, "how long to wait for the daemon");

namespace {

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? absl::StrFormat("%d B", b) : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string Rate(uint64_t hits, uint64_t misses) {
  if (hits + misses == 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * double(hits) / double(hits + misses));
}

void PrintTables(const kvtier::wire::StatsReply& s) {
  const auto& d = s.daemon();
  std::printf("kvtierd %s  up %.1f s  sessions %u  requests %lu (errors %lu)\n", d.version().c_str(),
              d.uptime_ms() / 1000.0, d.sessions(), (unsigned long)d.requests(),
              (unsigned long)d.request_errors());
  std::printf("memory: rss %s, of which outside the tier arenas %s; %lu pages indexed\n\n",
              Bytes(d.rss_bytes()).c_str(), Bytes(d.rss_anon_bytes()).c_str(),
              (unsigned long)d.index_pages());
  std::printf("%-6s %11s %11s %6s %9s %9s %9s %9s %11s %11s  %s\n", "TIER", "CAPACITY", "USED",
              "USE%", "PAGES", "HITS", "MISSES", "EVICTED", "BYTES IN", "BYTES OUT", "BACKING");
  for (const auto& t : s.tiers()) {
    double pct = t.capacity_bytes() ? 100.0 * double(t.used_bytes()) / double(t.capacity_bytes()) : 0;
    std::printf("%-6s %11s %11s %5.1f%% %9lu %9lu %9lu %9lu %11s %11s  %s\n", t.name().c_str(),
                Bytes(t.capacity_bytes()).c_str(), Bytes(t.used_bytes()).c_str(), pct,
                (unsigned long)t.pages(), (unsigned long)t.hits(), (unsigned long)t.misses(),
                (unsigned long)t.evictions(), Bytes(t.bytes_in()).c_str(),
                Bytes(t.bytes_out()).c_str(), t.backing().c_str());
  }
  std::printf("\n%-6s %10s %10s %9s %9s %9s %9s %9s %9s\n", "TIER", "DEMOTED", "PROMOTED",
              "DROPPED", "CKSUM-ERR", "IO-QUEUE", "IO-ERR", "RECOVERED", "BAD-REC");
  for (const auto& t : s.tiers()) {
    std::printf("%-6s %10lu %10lu %9lu %9lu %9lu %9lu %9lu %9lu\n", t.name().c_str(),
                (unsigned long)t.demotions(), (unsigned long)t.promotions(),
                (unsigned long)t.dropped(), (unsigned long)t.checksum_errors(),
                (unsigned long)t.io_inflight(), (unsigned long)t.io_errors(),
                (unsigned long)t.recovered_pages(), (unsigned long)t.dropped_records());
  }
  std::printf("\n%-16s %9s %11s %9s %9s %9s %9s %9s\n", "NAMESPACE", "PAGES", "BYTES",
              "LOOKUP-HIT", "GET-HIT", "PUTS", "DEDUP", "QUOTA-EV");
  for (const auto& n : s.namespaces()) {
    std::printf("%-16s %9lu %11s %10s %9s %9lu %9lu %9lu\n", n.name().c_str(),
                (unsigned long)n.pages(), Bytes(n.bytes()).c_str(),
                Rate(n.lookup_hits(), n.lookup_misses()).c_str(),
                Rate(n.get_hits(), n.get_misses()).c_str(), (unsigned long)n.puts(),
                (unsigned long)n.dedup_puts(), (unsigned long)n.quota_evictions());
  }
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kvtierctl: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kvtierctl stats [--json] [--endpoint=...] [--tenant=... --token=...]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::string cmd = args.size() > 1 ? args[1] : "stats";
  if (cmd != "stats") return Fail("unknown command '" + cmd + "' (try: kvtierctl stats)");
  kvtier::ClientOptions opts;
  opts.endpoint = absl::GetFlag(FLAGS_endpoint);
  opts.tenant = absl::GetFlag(FLAGS_tenant);
  opts.token = absl::GetFlag(FLAGS_token);
  if (opts.token.empty() && std::getenv("KVTIER_TOKEN")) opts.token = std::getenv("KVTIER_TOKEN");
  opts.client_name = "kvtierctl";
  opts.timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  auto client = kvtier::Client::Connect(opts);
  if (!client.ok()) return Fail(std::string(client.status().message()));
  auto stats = (*client)->Stats();
  if (!stats.ok()) return Fail(std::string(stats.status().message()));
  if (absl::GetFlag(FLAGS_json)) {
    std::string json;
    google::protobuf::util::JsonPrintOptions o;
    o.add_whitespace = true;
    o.always_print_primitive_fields = true;
    o.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(*stats, &json, o);
    std::printf("%s", json.c_str());
  } else {
    PrintTables(*stats);
  }
  return 0;
}
