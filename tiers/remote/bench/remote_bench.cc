// kvtier-remote-bench: what the slot router costs. Times MultiGet of N values
// (a) through RedisCluster with all keys on one node (hash tag), (b) through
// RedisCluster spread over every master, against (c) a raw hiredis pipeline
// of the same one-node GETs on one connection. Medians over repeats.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "kvtier/cli.h"
#include "tiers/remote/cluster_map.h"
#include "tiers/remote/crc16.h"
#include "tiers/remote/redis_cluster.h"

ABSL_FLAG(std::string, seeds, "",
          "cluster seeds, host:port,... (scripts/redis_cluster.sh writes DIR/seeds)");
ABSL_FLAG(int, values, 64, "values per batch");
ABSL_FLAG(int, value_bytes, 1 << 20, "bytes per value");
ABSL_FLAG(int, repeats, 15, "timed batches per mode (modes alternate); medians reported");

namespace kvtier::tiers::remote {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The baseline: one hiredis connection, N "GET %b" appended, N replies read.
double RawPipelineMs(redisContext* ctx, const std::vector<std::string>& keys, size_t bytes) {
  const absl::Time start = absl::Now();
  for (const std::string& k : keys) redisAppendCommand(ctx, "GET %b", k.data(), k.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    void* reply = nullptr;
    if (redisGetReply(ctx, &reply) != REDIS_OK) {
      std::fprintf(stderr, "raw pipeline: %s\n", ctx->errstr);
      std::exit(1);
    }
    if (static_cast<redisReply*>(reply)->len != bytes) std::exit(1);
    freeReplyObject(reply);
  }
  return absl::ToDoubleMilliseconds(absl::Now() - start);
}

double ClusterMs(RedisCluster& cluster, const std::vector<std::string>& keys, size_t bytes) {
  const absl::Time start = absl::Now();
  auto got = cluster.MultiGet(keys);
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  for (const auto& g : got) {
    if (!g.ok() || !g->has_value() || (*g)->size() != bytes) {
      std::fprintf(stderr, "MultiGet failed: %s\n",
                   g.ok() ? "bad value" : g.status().ToString().c_str());
      std::exit(1);
    }
  }
  return ms;
}

int Run() {
  RedisClusterConfig config;
  config.seeds = absl::StrSplit(absl::GetFlag(FLAGS_seeds), ',', absl::SkipEmpty());
  auto cluster = RedisCluster::Create(config);
  if (!cluster.ok()) {
    std::fprintf(stderr, "kvtier-remote-bench: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const int n = absl::GetFlag(FLAGS_values);
  const size_t bytes = absl::GetFlag(FLAGS_value_bytes);
  std::vector<std::string> one, spread;
  for (int i = 0; i < n; ++i) {
    one.push_back(absl::StrCat("bench{one}:", i));
    spread.push_back(absl::StrCat("bench:", i));
  }
  const std::string value(bytes, 'v');
  std::vector<KeyValue> kvs;
  for (int i = 0; i < n; ++i) kvs.push_back({one[i], value}), kvs.push_back({spread[i], value});
  for (const absl::Status& s : (*cluster)->MultiSet(kvs)) {
    if (!s.ok()) return std::fprintf(stderr, "MultiSet: %s\n", s.ToString().c_str()), 1;
  }
  auto ep = ParseEndpoint(*(*cluster)->slot_map().MasterOf(KeySlot(one[0]))).value();
  redisContext* raw = redisConnect(ep.host.c_str(), ep.port);
  if (raw == nullptr || raw->err) return std::fprintf(stderr, "raw connect failed\n"), 1;
  std::vector<double> raw_ms, one_ms, spread_ms;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats) + 1; ++r) {  // first round: warm-up
    const double a = RawPipelineMs(raw, one, bytes), b = ClusterMs(**cluster, one, bytes),
                 c = ClusterMs(**cluster, spread, bytes);
    if (r == 0) continue;
    raw_ms.push_back(a), one_ms.push_back(b), spread_ms.push_back(c);
  }
  redisFree(raw);
  const double mib = n * bytes / 1048576.0;
  auto line = [&](const char* name, double ms) {
    std::printf("%-34s median %8.2f ms  %7.0f MiB/s  x%.2f of raw\n", name, ms, mib / (ms / 1e3),
                Median(raw_ms) / ms);
  };
  std::printf("%d x %zu B per batch, %zu repeats\n", n, bytes, raw_ms.size());
  line("raw hiredis pipeline, 1 node", Median(raw_ms));
  line("RedisCluster::MultiGet, 1 node", Median(one_ms));
  line("RedisCluster::MultiGet, 3 masters", Median(spread_ms));
  return 0;
}

}  // namespace
}  // namespace kvtier::tiers::remote

int main(int argc, char* argv[]) {
  kvtier::ParseCommandLine(
      argc, argv,
      "MultiGet through the Redis Cluster router vs a raw hiredis pipeline.\n"
      "Usage: kvtier-remote-bench --seeds=host:port,... [--values=64 --value_bytes=1048576]");
  if (absl::GetFlag(FLAGS_seeds).empty()) {
    std::fprintf(stderr, "kvtier-remote-bench: --seeds is required (see --help)\n");
    return 2;
  }
  return kvtier::tiers::remote::Run();
}
