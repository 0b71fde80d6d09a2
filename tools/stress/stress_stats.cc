// Counters, the time series, quantiles, the error log and page owners of a
// replay.
#include "tools/stress/stress_stats.h"

#include <algorithm>
#include <cmath>

#include "common/quantile.h"

namespace kvtier::stress {

uint64_t Counters::GetBytes() const {
  uint64_t b = 0;
  for (const auto& t : get_bytes_by_tier) b += t.load(std::memory_order_relaxed);
  return b;
}

Sample TakeSample(const Counters& c, double elapsed_s, uint64_t page_bytes) {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  Sample s;
  s.elapsed_s = elapsed_s;
  s.requests = ld(c.requests);
  s.pages = ld(c.pages);
  s.hit_pages = ld(c.hit_pages);
  s.get_bytes = c.GetBytes();
  s.put_bytes = ld(c.put_stored) * page_bytes;
  s.errors = ld(c.errors);
  s.corrupt_pages = ld(c.corrupt_pages);
  return s;
}

std::vector<SeriesPoint> ToSeries(absl::Span<const Sample> samples) {
  std::vector<SeriesPoint> out;
  Sample prev;
  for (const Sample& s : samples) {
    out.push_back({.t_s = s.elapsed_s, .requests = s.requests, .failed = s.errors,
                   .corrupt_pages = s.corrupt_pages,
                   .interval_requests = s.requests - prev.requests,
                   .interval_failed = s.errors - prev.errors, .pages = s.pages - prev.pages,
                   .hit_pages = s.hit_pages - prev.hit_pages});
    prev = s;
  }
  return out;
}

void Latencies::Merge(const Latencies& o) {
  lookup_us.insert(lookup_us.end(), o.lookup_us.begin(), o.lookup_us.end());
  get_us.insert(get_us.end(), o.get_us.begin(), o.get_us.end());
  put_us.insert(put_us.end(), o.put_us.begin(), o.put_us.end());
}

Quantiles ComputeQuantiles(std::vector<double>& v) {
  Quantiles q;
  q.count = v.size();
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  q.p50 = tools::NearestRank(v, 50);
  q.p90 = tools::NearestRank(v, 90);
  q.p99 = tools::NearestRank(v, 99);
  q.max = v.back();
  return q;
}

void ErrorLog::Record(std::string message) {
  absl::MutexLock lock(&mu_);
  if (kept_.size() < kKept) kept_.push_back(std::move(message));
}

std::vector<std::string> ErrorLog::Kept() const {
  absl::MutexLock lock(&mu_);
  return kept_;
}

void PutOwners::Claim(absl::Span<const PageKey> keys, uint8_t endpoint) {
  absl::MutexLock lock(&mu_);
  for (const PageKey& k : keys) owner_.try_emplace(k, endpoint);
}

uint8_t PutOwners::Owner(const PageKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = owner_.find(key);
  return it == owner_.end() ? kUnknown : it->second;
}

}  // namespace kvtier::stress
