// `remote_get`: GET of pages that sit in the shared cache (Redis Cluster)
// through a reader kvtierd, against the raw pipelined hiredis GET of the same
// records from the same cluster (raw_cluster.h), in the same repeat loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_util.h"
#include "nlohmann/json.hpp"

namespace kvtier::bench {

struct RemoteGetOptions {
  // A daemon with the shared cache that PUTs the pages and EVICTs them down
  // into the cluster. The reader is BenchOptions::endpoint: another daemon
  // on the same cluster, with --promote_on_get=false so every GET reads the
  // shared cache, and --prefetch_lookahead=false.
  std::string writer_endpoint;
  std::vector<std::string> seeds;  // host:port of cluster nodes (the raw client's)
  size_t pages = 64;
  uint64_t page_bytes = 1ull << 20;
  std::vector<size_t> batches = {64, 32};  // pages per GET request / pipeline round
};

absl::StatusOr<nlohmann::json> RunRemoteGet(const BenchOptions& o, const RemoteGetOptions& r);

}  // namespace kvtier::bench
