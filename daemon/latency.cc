// Histogram recording and quantile math; request type names come from the
// wire schema's descriptor.
#include "daemon/latency.h"

#include <algorithm>
#include <bit>

#include "absl/strings/ascii.h"
#include "kvtier.pb.h"

namespace kvtier::daemon {

int LatencyHistogram::BucketFor(uint64_t ns) {
  if (ns <= UpperBoundNs(0)) return 0;
  // Smallest i with 1000 * 2^i >= ns, i.e. ceil(log2(ns / 1000)).
  const uint64_t units = (ns + 999) / 1000;  // ceil(ns / 1 us)
  // 2^i >= ns / 1000 holds exactly when 2^i >= ceil(ns / 1000): i is an integer power.
  const int i = static_cast<int>(std::bit_width(units - 1));
  return std::min(i, kFiniteBuckets);
}

void LatencyHistogram::Record(uint64_t ns) {
  buckets_[BucketFor(ns)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  uint64_t seen = max_ns_.load(std::memory_order_relaxed);
  while (ns > seen && !max_ns_.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
  }
}

LatencyHistogram::Snapshot LatencyHistogram::Snap() const {
  Snapshot s;
  for (int i = 0; i < kBuckets; ++i) s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  s.count = count_.load(std::memory_order_relaxed);
  s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  s.max_ns = max_ns_.load(std::memory_order_relaxed);
  return s;
}

double LatencyHistogram::Snapshot::QuantileNs(double q) const {
  uint64_t total = 0;
  for (uint64_t b : buckets) total += b;
  if (total == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * double(total);
  uint64_t below = 0;
  for (int i = 0; i < kBuckets; ++i) {
    if (buckets[i] == 0 || double(below + buckets[i]) < rank) {
      below += buckets[i];
      continue;
    }
    // The +Inf bucket has no upper bound: the largest value seen is the
    // best estimate there.
    if (i == kFiniteBuckets) return double(max_ns);
    const double lo = i == 0 ? 0 : double(UpperBoundNs(i - 1));
    const double hi = double(UpperBoundNs(i));
    const double v = lo + (hi - lo) * (rank - double(below)) / double(buckets[i]);
    return max_ns > 0 ? std::min(v, double(max_ns)) : v;
  }
  return double(max_ns);
}

void RequestMetrics::CountRequest(int type) {
  requests_[Clamp(type)].fetch_add(1, std::memory_order_relaxed);
}

void RequestMetrics::CountError(int type) {
  errors_[Clamp(type)].fetch_add(1, std::memory_order_relaxed);
}

void GetStages::Record(uint64_t total_ns, const Durations& ns) {
  const int b = LatencyHistogram::BucketFor(total_ns);
  count_[b].fetch_add(1, std::memory_order_relaxed);
  for (int k = 0; k < kStages; ++k) sum_ns_[b][k].fetch_add(ns[k], std::memory_order_relaxed);
}

std::array<GetStages::Bucket, LatencyHistogram::kBuckets> GetStages::Snap() const {
  std::array<Bucket, LatencyHistogram::kBuckets> out;
  for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
    out[b].count = count_[b].load(std::memory_order_relaxed);
    for (int k = 0; k < kStages; ++k) out[b].sum_ns[k] = sum_ns_[b][k].load(std::memory_order_relaxed);
  }
  return out;
}

void RequestMetrics::RecordLatency(int type, uint64_t ns) { hist_[Clamp(type)].Record(ns); }

uint64_t RequestMetrics::requests(int type) const {
  return requests_[Clamp(type)].load(std::memory_order_relaxed);
}

uint64_t RequestMetrics::errors(int type) const {
  return errors_[Clamp(type)].load(std::memory_order_relaxed);
}

std::string RequestMetrics::TypeName(int type) {
  const auto* field = wire::Request::descriptor()->FindFieldByNumber(type);
  // 0: the request failed decoding, so its type is unknown.
  if (type == 0) return "INVALID";
  if (field == nullptr || field->containing_oneof() == nullptr) return "UNKNOWN";
  return absl::AsciiStrToUpper(field->name());
}

}  // namespace kvtier::daemon
