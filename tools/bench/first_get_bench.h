// `first_get`: the first GET into a freshly registered buffer against a
// second (warm) GET of the same pages, with the daemon's registration
// warm-up (--buffer_warmup) on, and on a baseline daemon with it off.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_util.h"
#include "nlohmann/json.hpp"

namespace kvtier::bench {

struct FirstGetOptions {
  std::string baseline_endpoint;  // a daemon with --buffer_warmup=false; empty: none
  std::vector<uint64_t> buffer_sizes;  // bytes of each fresh buffer (and of each GET)
  uint64_t page_bytes = 1ull << 20;
  double max_wait_s = 10;  // for the daemon to report a registration warm
};

absl::StatusOr<nlohmann::json> RunFirstGet(const BenchOptions& o, const FirstGetOptions& f);

}  // namespace kvtier::bench
