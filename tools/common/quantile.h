// Nearest-rank percentiles of latency samples, shared by kvtier-bench and
// kvtier-stress so both report p50/p99 the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvtier::tools {

// The p-th percentile (0 < p <= 100) of ascending `sorted` by nearest rank:
// the smallest sample with at least p% of the samples at or below it.
// 0 when there are no samples.
inline double NearestRank(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace kvtier::tools
