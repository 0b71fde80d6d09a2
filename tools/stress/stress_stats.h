// Figures of a replay: live counters the workers bump (read by the progress
// bar and the CSV sampler while the run goes on), per-call latencies kept per
// worker and merged at the end, the first few error messages, and which
// endpoint first PUT each page (to tell cross-daemon remote hits apart).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kvtier/client.h"

namespace kvtier::stress {

inline constexpr size_t kTiers = 5;  // indexed by TierKind: none, hbm, host, nvme, remote
inline constexpr const char* kTierNames[kTiers] = {"none", "hbm", "host", "nvme", "remote"};
inline size_t TierIndex(TierKind t) {
  const size_t i = static_cast<size_t>(t);
  return i < kTiers ? i : 0;
}

// Monotonic counters; every field only grows during a run.
struct Counters {
  std::atomic<uint64_t> requests{0};       // requests finished (with or without error)
  std::atomic<uint64_t> pages{0};          // pages looked up (input pages of finished requests)
  std::atomic<uint64_t> hit_pages{0};      // leading pages LOOKUP found and GET served
  std::atomic<uint64_t> blocks{0};         // trace blocks of finished requests
  std::atomic<uint64_t> hit_blocks{0};     // blocks all of whose pages were hits
  std::array<std::atomic<uint64_t>, kTiers> hit_pages_by_tier{};  // by LOOKUP's tier
  std::array<std::atomic<uint64_t>, kTiers> get_bytes_by_tier{};  // by GET's served tier
  std::atomic<uint64_t> get_races{0};      // LOOKUP hits gone by the GET (counted as misses)
  // Hits LOOKUP found on the remote tier (and GET served) whose first PUT
  // went through another endpoint (another daemon stored them in the cluster).
  std::atomic<uint64_t> remote_hits_other_endpoint{0};
  std::atomic<uint64_t> put_stored{0};     // pages newly stored
  std::atomic<uint64_t> put_dedup{0};      // pages already present
  std::atomic<uint64_t> put_not_stored{0}; // pages refused for room (chain cut)
  std::atomic<uint64_t> decode_pages{0};   // of the PUT pages, those the output completed
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> corrupt_pages{0};

  static void Add(std::atomic<uint64_t>& c, uint64_t n) { c.fetch_add(n, std::memory_order_relaxed); }
  uint64_t GetBytes() const;
};

// Where a session's figures go: the run's totals and the endpoint's own.
struct CounterPair {
  Counters* total = nullptr;
  Counters* endpoint = nullptr;
  void Add(std::atomic<uint64_t> Counters::*field, uint64_t n) const {
    Counters::Add(total->*field, n);
    Counters::Add(endpoint->*field, n);
  }
  void AddTier(std::array<std::atomic<uint64_t>, kTiers> Counters::*field, TierKind t,
               uint64_t n) const {
    Counters::Add((total->*field)[TierIndex(t)], n);
    Counters::Add((endpoint->*field)[TierIndex(t)], n);
  }
};

// One point of the CSV time series.
struct Sample {
  double elapsed_s = 0;
  uint64_t requests = 0, pages = 0, hit_pages = 0, get_bytes = 0, put_bytes = 0;
  uint64_t errors = 0, corrupt_pages = 0;
};
Sample TakeSample(const Counters& c, double elapsed_s, uint64_t page_bytes);

// One interval of the hit-rate time series: cumulative requests and failures
// at its end, and the pages looked up within it (a request's pages count
// once its GETs are done, before its PUTs).
struct SeriesPoint {
  double t_s = 0;  // end of the interval, seconds since the replay started
  uint64_t requests = 0, failed = 0, corrupt_pages = 0;  // cumulative
  uint64_t interval_requests = 0, interval_failed = 0, pages = 0, hit_pages = 0;
  bool has_rate() const { return pages > 0; }
  double hit_rate() const { return pages ? static_cast<double>(hit_pages) / pages : 0; }
};
// Differences of consecutive cumulative samples (the first from zero).
std::vector<SeriesPoint> ToSeries(absl::Span<const Sample> samples);

// Per-call latencies in microseconds, one set per worker (no sharing).
struct Latencies {
  std::vector<double> lookup_us, get_us, put_us;
  void Merge(const Latencies& o);
};

struct Quantiles {
  uint64_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};
// Nearest-rank quantiles of `v` (sorted in place).
Quantiles ComputeQuantiles(std::vector<double>& v);

// Error messages: all are counted, the first `kKept` are kept for the report.
class ErrorLog {
 public:
  static constexpr size_t kKept = 20;
  void Record(std::string message);
  std::vector<std::string> Kept() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> kept_ ABSL_GUARDED_BY(mu_);
};

// The endpoint that first PUT each page; kept only when a run has several.
class PutOwners {
 public:
  static constexpr uint8_t kUnknown = 0xFF;
  // Records `endpoint` for the keys that have no owner yet.
  void Claim(absl::Span<const PageKey> keys, uint8_t endpoint);
  uint8_t Owner(const PageKey& key) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<PageKey, uint8_t> owner_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::stress
